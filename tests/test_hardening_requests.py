"""Hostile and oversized request bodies: each is a clear 4xx in its API family's shape, and none
of them stalls the server for anyone else while it is refused."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
import pytest
from serverkit import run_server

from llamactl.engine.model import Model
from llamactl.models import embedded_model_path

CHAT = "/v1/chat/completions"
USER = [{"role": "user", "content": "Hi"}]


def post_raw(live, path: str, raw: bytes, timeout: float = 60) -> httpx.Response:
    return httpx.post(
        live.url + path, content=raw, headers={"content-type": "application/json"}, timeout=timeout
    )


def post(live, path: str, body: dict[str, Any]) -> httpx.Response:
    return post_raw(live, path, json.dumps(body).encode())


def openai_error(r: httpx.Response) -> str:
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["code"] == 400
    return err["message"]


def anthropic_error(r: httpx.Response) -> str:
    assert r.status_code == 400, r.text
    body = r.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    return body["error"]["message"]


# ------------------------------------------------------------------ strings that are not text

LONE_SURROGATE = b'"\\ud800"'


@pytest.mark.parametrize(
    ("path", "template", "anthropic"),
    [
        (CHAT, b'{"messages": [{"role": "user", "content": %s}]}', False),
        (CHAT, b'{"messages": [{"role": "user", "content": "x"}], "stop": [%s]}', False),
        ("/v1/completions", b'{"prompt": %s, "max_tokens": 2}', False),
        ("/v1/responses", b'{"input": %s, "max_output_tokens": 2}', False),
        ("/v1/responses/input_tokens", b'{"input": %s}', False),
        ("/v1/messages", b'{"max_tokens": 2, "messages": [{"role": "user", "content": %s}]}', True),
        ("/v1/messages/count_tokens", b'{"messages": [{"role": "user", "content": %s}]}', True),
    ],
)
def test_lone_surrogates_are_a_400_naming_the_problem(server, path, template, anthropic):
    for surrogate in (LONE_SURROGATE, b'"a\\udc00b"'):
        r = post_raw(server, path, template % surrogate)
        message = anthropic_error(r) if anthropic else openai_error(r)
        assert "surrogate" in message
    assert httpx.get(server.url + "/health").status_code == 200


def test_a_valid_surrogate_pair_is_text(server):
    raw = b'{"messages": [{"role": "user", "content": "\\ud83d\\ude00"}], "max_tokens": 2}'
    assert post_raw(server, CHAT, raw).status_code == 200


# ------------------------------------------------------------------------ what OpenAI checks


def test_unknown_role_is_refused_naming_the_field(server):
    r = post(server, CHAT, {"messages": [{"role": "alien", "content": "hi"}]})
    assert "messages.0.role" in openai_error(r)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("repeat_penalty", float("nan")),
        ("repeat_penalty", float("inf")),
        ("repeat_penalty", 0),
        ("temperature", float("nan")),
        ("top_k", 2**63),
        ("seed", 2**70),
    ],
)
def test_out_of_range_sampling_values(server, field, value):
    raw = json.dumps({"messages": USER, "max_tokens": 2, field: value}).encode()
    assert f"'{field}'" in openai_error(post_raw(server, CHAT, raw))


def test_large_seeds_within_int64_are_accepted_and_repeatable(server):
    body = {"messages": USER, "max_tokens": 8, "temperature": 1.0, "seed": 2**63 - 1}
    first, second = post(server, CHAT, body), post(server, CHAT, body)
    assert first.status_code == 200, first.text
    text = first.json()["choices"][0]["message"]["content"]
    assert text == second.json()["choices"][0]["message"]["content"]


def test_anthropic_max_tokens_is_bounded(server):
    body = {"model": server.state.model_id, "max_tokens": 2**63, "messages": USER}
    r = post(server, "/v1/messages", body)
    assert "max_tokens" in anthropic_error(r)


@pytest.mark.slow
def test_responses_apply_the_server_default_max_tokens():
    with run_server(parallel=1, max_tokens=6) as live:
        body = {"input": "Count from one to a hundred.", "temperature": 0, "ignore_eos": True}
        r = post(live, "/v1/responses", body)
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["output_tokens"] <= 6


# ---------------------------------------------------------------------------------- limits


def test_too_many_messages_names_the_limit(server):
    messages = [{"role": "user", "content": "hi"}] * 5000
    message = openai_error(post(server, CHAT, {"messages": messages}))
    assert "'messages'" in message and "4096" in message and "--max-messages" in message
    body = {"model": server.state.model_id, "max_tokens": 2, "messages": messages}
    r = post(server, "/v1/messages", body)
    assert "--max-messages" in anthropic_error(r)
    r = post(server, "/v1/responses", {"input": messages})
    assert "'input'" in openai_error(r)


def test_stop_string_limits(server):
    many = openai_error(post(server, CHAT, {"messages": USER, "stop": ["x"] * 33}))
    assert "--max-stop-strings" in many
    long = openai_error(post(server, CHAT, {"messages": USER, "stop": ["y" * 513]}))
    assert "'stop.0'" in long and "--max-stop-length" in long
    r = post(server, "/v1/completions", {"prompt": "a", "stop": ["x"] * 33})
    assert "--max-stop-strings" in openai_error(r)
    body = {"model": server.state.model_id, "max_tokens": 2, "messages": USER}
    r = post(server, "/v1/messages", {**body, "stop_sequences": ["s"] * 40})
    assert "stop_sequences" in anthropic_error(r)


def tool(i: int, parameters: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": f"f{i}", "parameters": parameters or {"type": "object"}},
    }


def deep_schema(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


def test_tool_and_schema_limits(server):
    tools = [tool(i) for i in range(129)]
    assert "--max-tools" in openai_error(post(server, CHAT, {"messages": USER, "tools": tools}))
    deep = [tool(0, deep_schema(40))]
    message = openai_error(post(server, CHAT, {"messages": USER, "tools": deep}))
    assert "tools.0.parameters" in message and "--max-schema-depth" in message
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": deep_schema(40)}}
    r = post(server, CHAT, {"messages": USER, "response_format": fmt})
    assert "response_format.json_schema.schema" in openai_error(r)
    big = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(12000)}}
    r = post(server, CHAT, {"messages": USER, "tools": [tool(0, big)]})
    assert "--max-schema-bytes" in openai_error(r)
    r = post(server, CHAT, {"messages": USER, "grammar": "root ::= " + '"a" ' * 70000})
    assert "'grammar'" in openai_error(r)


def nested_grammar(depth: int) -> str:
    return "root ::= " + "(" * depth + '"a"' + ")" * depth


def string_format(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}


# Grammars llama.cpp would parse by recursing once per level: deep enough, they overflowed the
# stack and killed the server (Claude Code's Workflow tool has maxLength 524288).
@pytest.mark.parametrize(
    ("path", "body", "refusal"),
    [
        (CHAT, {"grammar": nested_grammar(20000)}, "nests groups"),
        ("/completion", {"prompt": "a", "grammar": nested_grammar(20000)}, "nests groups"),
        (CHAT, {"response_format": string_format({"minLength": 10**6})}, "minLength"),
        (CHAT, {"response_format": string_format({"pattern": "^a{1,99999}$"})}, "pattern"),
        (CHAT, {"response_format": string_format({"type": "string", "maxLength": 524288})}, None),
        (CHAT, {"response_format": string_format({"type": "array", "maxItems": 10**9})}, None),
        (
            CHAT,
            {
                "tool_choice": "required",
                "tools": [tool(0, {"type": "object", "properties": {"s": {"maxLength": 524288}}})],
            },
            None,
        ),
        (CHAT, {"grammar": nested_grammar(1000)}, None),
    ],
    ids=[
        "deep-grammar",
        "deep-native-grammar",
        "min-length",
        "pattern-count",
        "max-length",
        "max-items",
        "tool-max-length",
        "grammar-1000-deep",
    ],
)
def test_grammars_that_would_overflow_the_stack(server, path, body, refusal):
    base = {"messages": USER} if path == CHAT else {}
    r = post(server, path, {**base, "max_tokens": 4, "n_predict": 4, **body})
    if refusal is None:  # a huge upper bound is dropped: the answer's max_tokens bounds it
        assert r.status_code == 200, r.text
    else:
        assert r.status_code == 400 and refusal in r.text, r.text
    assert httpx.get(server.url + "/health", timeout=10).status_code == 200


def test_logit_bias_larger_than_the_vocabulary(server):
    n_vocab = server.state.engine.model.n_vocab
    bias = {str(i % n_vocab) + "0" * (i // n_vocab): 1 for i in range(n_vocab + 1)}
    message = openai_error(post(server, CHAT, {"messages": USER, "logit_bias": bias}))
    assert "'logit_bias'" in message and str(n_vocab) in message


def test_a_prompt_far_over_the_context_is_refused_quickly(server):
    """4,000 long messages render to ~1M tokens; tokenising stops past the slot's context."""
    messages = [{"role": "user", "content": "lorem ipsum dolor " * 60}] * 4000
    started = time.monotonic()
    r = post(server, CHAT, {"messages": messages})
    assert r.status_code == 400 and "context size" in r.json()["error"]["message"]
    assert r.json()["error"]["type"] == "exceed_context_size_error"
    assert time.monotonic() - started < 30  # a correctness bound: it used to take minutes


# ------------------------------------------------------------ templated tokenising is exact


@pytest.mark.slow
def test_piecewise_tokenising_equals_one_call():
    model = Model(embedded_model_path(), vocab_only=True)
    try:
        turns = "".join(
            f"<|im_start|>{role}\n  {i} é 日本 <|endoftext|>\t<repo_name>x<|im_end|>\n"
            for i, role in enumerate(["user", "assistant"] * 600)
        )
        assert len(turns) > 8 * 4096
        for add_special in (True, False):
            whole = model._tokenize(turns, add_special, True)
            assert model.tokenize(turns, add_special=add_special) == whole
    finally:
        model.close()


# --------------------------------------------------------- nothing stalls the other clients


def _bad_bodies(n_vocab: int) -> list[tuple[str, bytes]]:
    many = [{"role": "user", "content": f"message {i}"} for i in range(50000)]
    huge = [{"role": "user", "content": "m"} for _ in range(200000)]
    long_chat = [{"role": "user", "content": "lorem ipsum dolor " * 60}] * 4000
    bias = {str(i): 1.0 for i in range(n_vocab)} | {str(n_vocab + i): 1.0 for i in range(60000)}
    return [
        (CHAT, json.dumps({"messages": many}).encode()),
        (CHAT, json.dumps({"messages": huge}).encode()),
        (CHAT, json.dumps({"messages": USER, "stop": ["stop string"] * 200000}).encode()),
        (CHAT, json.dumps({"messages": USER, "logit_bias": bias}).encode()),
        (CHAT, json.dumps({"messages": long_chat}).encode()),
        ("/v1/messages", json.dumps({"model": "m", "max_tokens": 5, "messages": many}).encode()),
    ]


@pytest.mark.slow
def test_bad_bodies_do_not_stall_health_or_running_streams():
    with run_server(parallel=2) as live:
        bodies = _bad_bodies(live.state.engine.model.n_vocab)
        gaps: list[float] = []
        health: list[float] = []
        statuses: list[int] = []
        stream_done = threading.Event()

        def stream() -> None:
            body = {
                "messages": USER,
                "stream": True,
                "max_tokens": 400,
                "ignore_eos": True,
                "temperature": 0,
            }
            with httpx.stream("POST", live.url + CHAT, json=body, timeout=120) as r:
                last = None
                for line in r.iter_lines():
                    now = time.monotonic()
                    if line.startswith("data: ") and last is not None:
                        gaps.append(now - last)
                    last = now
            stream_done.set()

        def flood() -> None:
            for path, raw in bodies:
                statuses.append(post_raw(live, path, raw, timeout=120).status_code)

        streamer = threading.Thread(target=stream)
        flooder = threading.Thread(target=flood)
        streamer.start()
        time.sleep(0.5)
        flooder.start()
        while flooder.is_alive():
            started = time.monotonic()
            assert httpx.get(live.url + "/health", timeout=10).status_code == 200
            health.append(time.monotonic() - started)
            time.sleep(0.05)
        flooder.join()
        streamer.join(timeout=120)
        assert stream_done.is_set()
        print(f"health max {max(health):.3f}s over {len(health)}, gap max {max(gaps):.3f}s")
        assert statuses and all(400 <= s < 500 for s in statuses), statuses
        assert max(health) < 1.0, sorted(health)[-5:]
        # generous: a bound on stalls, not a speed goal (the flood shares two cores)
        assert max(gaps) < 2.0, sorted(gaps)[-5:]
