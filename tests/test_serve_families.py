"""The server's black-box promises on a dense and a sliding-window model (SmolLM2 and Gemma 3
270M, `tests/model_matrix.py`), run the way a user runs them: `llamactl serve -m MODEL
--parallel 4`, requests over HTTP through every API family.

Greedy answers do not depend on company; a conversation never continues on another's state;
a repeated prompt is reused as llama-server reuses it (64 of 69 tokens on Gemma 3 270M); a
request that stops at its token limit says so.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anthropic
import httpx
import openai
import pytest
from model_matrix import gemma_path
from serverkit import LiveServer, run_server

from llamactl.models import embedded_model_path

pytestmark = pytest.mark.slow  # every test here loads a model

BACKGROUND = "Background: " + " ".join(
    f"note {i} on the migration of arctic terns." for i in range(1, 25)
)


@pytest.fixture(scope="module", params=["dense", "swa"])
def live(request):
    model = embedded_model_path() if request.param == "dense" else gemma_path()
    with run_server(model=str(model), parallel=4) as srv:
        yield srv


def post(srv: LiveServer, path: str, body: dict[str, Any]) -> dict[str, Any]:
    r = httpx.post(srv.url + path, json=body, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()


def chat(messages: list[dict], **kw: Any) -> tuple[str, dict[str, Any]]:
    return "/v1/chat/completions", {
        "messages": messages,
        "temperature": 0,
        "max_tokens": 48,
        **kw,
    }


def text_of(path: str, reply: dict[str, Any]) -> str:
    if path == "/v1/chat/completions":
        return reply["choices"][0]["message"]["content"]
    if path == "/v1/completions":
        return reply["choices"][0]["text"]
    if path == "/v1/responses":
        return "".join(
            part["text"]
            for item in reply["output"]
            if item["type"] == "message"
            for part in item["content"]
        )
    return "".join(block["text"] for block in reply["content"] if block["type"] == "text")


def cached_of(path: str, reply: dict[str, Any]) -> int:
    usage = reply["usage"]
    if path == "/v1/chat/completions" or path == "/v1/completions":
        return usage["prompt_tokens_details"]["cached_tokens"]
    if path == "/v1/responses":
        return usage["input_tokens_details"]["cached_tokens"]
    return usage["cache_read_input_tokens"]


def solo_then_together(
    srv: LiveServer, requests: list[tuple[str, dict[str, Any]]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    solo = [post(srv, path, body) for path, body in requests]
    with ThreadPoolExecutor(len(requests)) as pool:
        together = list(pool.map(lambda pb: post(srv, *pb), requests))
    return solo, together


def test_every_api_at_once_answers_as_alone(live):
    requests = [
        chat([{"role": "user", "content": "Write two sentences about the sea."}]),
        (
            "/v1/completions",
            {"prompt": "The three primary colors are", "temperature": 0, "max_tokens": 48},
        ),
        (
            "/v1/responses",
            {"input": "Name three rivers of Europe.", "temperature": 0, "max_output_tokens": 48},
        ),
        (
            "/v1/messages",
            {
                "model": "any",
                "max_tokens": 48,
                "temperature": 0,
                "messages": [{"role": "user", "content": "Describe a cat in one sentence."}],
            },
        ),
    ]
    solo, together = solo_then_together(live, requests)
    for (path, _), a, b in zip(requests, solo, together, strict=True):
        assert text_of(path, b) == text_of(path, a), path


def test_conversations_sharing_a_prefix_keep_their_own_state(live):
    def conv(question: str) -> tuple[str, dict[str, Any]]:
        return chat(
            [
                {"role": "system", "content": BACKGROUND},
                {"role": "user", "content": question},
            ]
        )

    requests = [conv("What is note 3 about?"), conv("Which note comes after note 7?")]
    solo, together = solo_then_together(live, requests)
    assert cached_of(*requests[1][:1], solo[1]) > 100  # the second reused the shared prefix
    for i, (a, b) in enumerate(zip(solo, together, strict=True)):
        assert text_of("/v1/chat/completions", b) == text_of("/v1/chat/completions", a), i


@pytest.mark.parametrize(
    "path, body",
    [
        chat([{"role": "user", "content": "List five animals that live in cold oceans, please."}]),
        (
            "/v1/responses",
            {
                "instructions": "You answer briefly.",
                "input": "List five animals that live in cold oceans, please.",
                "temperature": 0,
                "max_output_tokens": 16,
            },
        ),
        (
            "/v1/messages",
            {
                "model": "any",
                "system": "You answer briefly.",
                "max_tokens": 16,
                "temperature": 0,
                "messages": [
                    {"role": "user", "content": "List five animals that live in cold oceans."}
                ],
            },
        ),
    ],
    ids=["chat", "responses", "anthropic"],
)
def test_the_same_prompt_again_reuses_all_but_its_tail(live, path, body):
    """llama-server b11434 reuses 64 of a repeated 69-token prompt on Gemma 3 270M (its
    checkpoint sits a few tokens before the end); llamactl at least as much."""
    first = post(live, path, body)
    again = post(live, path, body)
    usage = again["usage"]
    if path == "/v1/chat/completions":
        n = usage["prompt_tokens"]
    elif path == "/v1/responses":
        n = usage["input_tokens"]  # cached ones included, as OpenAI counts
    else:
        n = usage["input_tokens"] + usage["cache_read_input_tokens"]  # Anthropic's split
    assert cached_of(path, again) >= n - 5
    assert text_of(path, again) == text_of(path, first)


def test_json_object_is_json_or_says_it_was_cut(live):
    reply = post(
        live,
        *chat(
            [{"role": "user", "content": "Give a JSON object with a name and an age."}],
            response_format={"type": "json_object"},
            max_tokens=64,
        ),
    )
    choice = reply["choices"][0]
    if choice["finish_reason"] == "length":
        return  # cut at max_tokens, and it says so
    assert choice["finish_reason"] == "stop"
    assert isinstance(json.loads(choice["message"]["content"]), dict)


def test_responses_report_why_they_stopped(live):
    client = openai.OpenAI(base_url=live.v1, api_key="none", max_retries=0)
    for limit in (8, 64, 256):
        r = client.responses.create(model="any", input="Say hi.", max_output_tokens=limit)
        assert r.usage is not None
        if r.status == "completed":  # the model ended its answer
            assert r.incomplete_details is None and r.usage.output_tokens <= limit
        else:
            assert r.status == "incomplete" and r.incomplete_details is not None
            assert r.incomplete_details.reason == "max_output_tokens"
            assert r.usage.output_tokens == limit
    cut = client.responses.create(  # greedy: a sampled answer may end within 8 tokens
        model="any",
        input="Count from one to one hundred in words.",
        max_output_tokens=8,
        temperature=0,
    )
    assert cut.status == "incomplete"
    assert cut.incomplete_details is not None
    assert cut.incomplete_details.reason == "max_output_tokens"
    assert cut.usage is not None and cut.usage.output_tokens == 8


def test_anthropic_sdk_stream_matches_the_whole_reply(live):
    client = anthropic.Anthropic(base_url=live.url, api_key="none", max_retries=0)
    args: dict[str, Any] = {
        "model": "any",
        "max_tokens": 32,
        "extra_body": {"temperature": 0},  # greedy (this SDK no longer takes it as an argument)
        "messages": [{"role": "user", "content": "Name a colour of the sky."}],
    }
    whole = client.messages.create(**args)
    with client.messages.stream(**args) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed == "".join(b.text for b in whole.content if b.type == "text")
    assert final.stop_reason == whole.stop_reason


def test_a_prompt_over_the_context_is_refused_in_each_providers_words(live):
    """Agents compact their history when the API says the prompt is too long, in its own words:
    Claude Code reads Anthropic's "prompt is too long", OpenAI clients the
    `context_length_exceeded` code; llama-server's type and fields stay."""
    n_ctx = live.state.engine.n_ctx_slot
    text = "tern " * (n_ctx + 1000)
    oai = openai.OpenAI(base_url=live.v1, api_key="none", max_retries=0)
    for call in (
        lambda: oai.chat.completions.create(
            model="any", messages=[{"role": "user", "content": text}], max_tokens=4
        ),
        lambda: oai.completions.create(model="any", prompt=text, max_tokens=4),
        lambda: oai.responses.create(model="any", input=text, max_output_tokens=16),
    ):
        with pytest.raises(openai.BadRequestError) as err:
            call()
        assert err.value.code == "context_length_exceeded"
        body = err.value.body
        assert isinstance(body, dict)
        assert body["type"] == "exceed_context_size_error" and body["n_ctx"] == n_ctx
        assert f"maximum context length is {n_ctx} tokens" in body["message"]
        assert "exceeds the available context size" in body["message"]
    claude = anthropic.Anthropic(base_url=live.url, api_key="none", max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as aerr:
        claude.messages.create(
            model="any", max_tokens=4, messages=[{"role": "user", "content": text}]
        )
    error = aerr.value.body["error"]  # type: ignore[index]
    assert error["type"] == "invalid_request_error"
    assert error["message"].startswith("prompt is too long: ")
    assert f"> {n_ctx} maximum" in error["message"]
    # llama-server's own endpoint keeps its body
    native = httpx.post(live.url + "/completion", json={"prompt": text, "n_predict": 2})
    assert native.status_code == 400
    assert native.json()["error"]["code"] == 400
    assert native.json()["error"]["type"] == "exceed_context_size_error"
