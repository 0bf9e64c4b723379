"""Model names in single-model mode: any name is answered by the one model (llama-server's
behaviour: clients hard-code `gpt-4o-mini` or a Claude name); `--strict-model-names` refuses
names that are not this model's with a 400 in each API family's error shape."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import httpx
import pytest

HI = [{"role": "user", "content": "Hi"}]
GREEDY = {"temperature": 0, "max_tokens": 3}

# (path, body) of one request per API family, naming a model the server does not have
REQUESTS = [
    ("/v1/chat/completions", {"model": "gpt-4o-mini", "messages": HI, **GREEDY}),
    ("/v1/completions", {"model": "gpt-3.5-turbo-instruct", "prompt": "Hi", **GREEDY}),
    ("/v1/responses", {"model": "gpt-4.1", "input": "Hi", "max_output_tokens": 3}),
    ("/v1/messages", {"model": "claude-sonnet-4", "messages": HI, "max_tokens": 3}),
    ("/v1/messages/count_tokens", {"model": "claude-sonnet-4", "messages": HI}),
    ("/v1/responses/input_tokens", {"model": "gpt-4.1", "input": "Hi"}),
    ("/apply-template", {"model": "gpt-4o-mini", "messages": HI}),
]


@pytest.fixture
def strict(server) -> Iterator[None]:
    state = server.state
    lenient = state.settings
    state.settings = dataclasses.replace(lenient, strict_model_names=True)
    try:
        yield
    finally:
        state.settings = lenient


@pytest.mark.parametrize(("path", "body"), REQUESTS, ids=[p for p, _ in REQUESTS])
def test_any_name_is_answered_by_the_one_model(server, path, body) -> None:
    r = httpx.post(server.url + path, json=body, timeout=60)
    assert r.status_code == 200, r.text


ANSWERS = [(path, body) for path, body in REQUESTS[:4]]  # the families that answer a `model`


@pytest.mark.parametrize(("path", "body"), ANSWERS, ids=[p for p, _ in ANSWERS])
def test_every_family_answers_with_the_name_it_was_asked_for(server, path, body) -> None:
    """One rule (server/common.py check_model): the client's name, else the server's."""
    got = httpx.post(server.url + path, json=body, timeout=60).json()
    assert got["model"] == body["model"]
    if path != "/v1/messages":  # Anthropic's API requires a name
        nameless = {k: v for k, v in body.items() if k != "model"}
        got = httpx.post(server.url + path, json=nameless, timeout=60).json()
        assert got["model"] == server.state.model_id


def test_the_chat_answer_names_the_model_asked_for(server) -> None:
    body = {"model": "gpt-4o-mini", "messages": HI, **GREEDY}
    got = httpx.post(server.v1 + "/chat/completions", json=body, timeout=60).json()
    assert got["model"] == "gpt-4o-mini"
    plain = {"messages": HI, **GREEDY}
    alone = httpx.post(server.v1 + "/chat/completions", json=plain, timeout=60).json()
    assert alone["choices"][0]["message"] == got["choices"][0]["message"]  # same model


@pytest.mark.parametrize(("path", "body"), REQUESTS, ids=[p for p, _ in REQUESTS])
def test_strict_names_refuse_other_models(server, strict, path, body) -> None:
    r = httpx.post(server.url + path, json=body, timeout=60)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert "'model'" in error["message"] and body["model"] in error["message"]
    if path.startswith("/v1/messages"):
        assert r.json()["type"] == "error" and error["type"] == "invalid_request_error"


def test_strict_names_accept_the_models_own_names(server, strict) -> None:
    state = server.state
    for name in (state.model_id, state.model_path.name, state.model_path.stem):
        body = {"model": name, "messages": HI, **GREEDY}
        r = httpx.post(server.v1 + "/chat/completions", json=body, timeout=60)
        assert r.status_code == 200, (name, r.text)
