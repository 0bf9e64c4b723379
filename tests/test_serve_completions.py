"""`POST /v1/completions`: raw prompts on the engine, OpenAI's `text_completion` shapes (checked
with the official SDK's types), streaming, several prompts × `n`, logprobs and errors."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from openai import OpenAI
from openai.types import Completion

PROMPT = "The capital of France is"


def post(live, body: dict[str, Any], path: str = "/v1/completions") -> httpx.Response:
    return httpx.post(live.url + path, json=body, timeout=120)


def stream(live, body: dict[str, Any]) -> list[Any]:
    events: list[Any] = []
    with httpx.stream(
        "POST", live.v1 + "/completions", json={**body, "stream": True}, timeout=120
    ) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: "):
                events.append(line[6:] if line == "data: [DONE]" else json.loads(line[6:]))
    return events


def error_of(r: httpx.Response) -> dict[str, Any]:
    body = r.json()
    assert set(body) == {"error"}
    # OpenAI's string code for a prompt over the context; else llama-server's: the status
    code = body["error"]["code"]
    assert code == r.status_code or (code == "context_length_exceeded" and r.status_code == 400)
    return body["error"]


def test_sdk_non_stream(server):
    c = OpenAI(base_url=server.v1, api_key="x", max_retries=0)
    r = c.completions.create(
        model=server.state.model_id, prompt=PROMPT, max_tokens=4, temperature=0
    )
    assert isinstance(r, Completion)
    assert r.id.startswith("cmpl-") and r.object == "text_completion"
    assert r.model == server.state.model_id and r.system_fingerprint
    [choice] = r.choices
    assert choice.index == 0 and choice.text and choice.finish_reason in ("stop", "length")
    assert choice.logprobs is None
    u = r.usage
    assert u.prompt_tokens == len(server.state.engine.model.tokenize(PROMPT))
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens
    assert r.model_extra["timings"]["predicted_n"] == u.completion_tokens


def test_token_prompt_equals_text_prompt(server):
    tokens = server.state.engine.model.tokenize(PROMPT)
    body = {"max_tokens": 4, "temperature": 0}
    a = post(server, {**body, "prompt": PROMPT}).json()["choices"][0]["text"]
    b = post(server, {**body, "prompt": tokens}).json()["choices"][0]["text"]
    assert a == b


def test_several_prompts_times_n(server):
    body = {"prompt": [PROMPT, "One, two,"], "n": 2, "max_tokens": 3, "temperature": 0}
    r = post(server, body).json()
    Completion.model_validate(r)
    assert [c["index"] for c in r["choices"]] == [0, 1, 2, 3]
    # greedy: both choices of one prompt agree; the prompts differ
    texts = [c["text"] for c in r["choices"]]
    assert texts[0] == texts[1] and texts[2] == texts[3]
    model = server.state.engine.model
    assert r["usage"]["prompt_tokens"] == len(model.tokenize(PROMPT)) + len(
        model.tokenize("One, two,")
    )
    assert r["usage"]["completion_tokens"] == r["timings"]["predicted_n"]


def test_stream_shapes(server):
    body = {"prompt": PROMPT, "max_tokens": 4, "stream_options": {"include_usage": True}}
    events = stream(server, body)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    for chunk in chunks:
        assert chunk["object"] == "text_completion"
        if not chunk["choices"] or chunk["choices"][0]["finish_reason"]:
            Completion.model_validate(chunk)  # the SDK's type has no null finish_reason
    assert len({c["id"] for c in chunks}) == 1
    finish = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert len(finish) == 1 and "timings" in finish[0]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] >= 1
    whole = post(server, {"prompt": PROMPT, "max_tokens": 4, "temperature": 0}).json()
    streamed = stream(server, {"prompt": PROMPT, "max_tokens": 4, "temperature": 0})
    text = "".join(c["choices"][0]["text"] for c in streamed[:-1] if c["choices"])
    assert text == whole["choices"][0]["text"]


def test_stream_several_prompts(server):
    events = stream(server, {"prompt": [PROMPT, "Hello"], "n": 2, "max_tokens": 2})
    finished = sorted(
        c["choices"][0]["index"] for c in events[:-1] if c["choices"][0]["finish_reason"]
    )
    assert finished == [0, 1, 2, 3]


def test_logprobs_legacy_shape(server):
    body = {"prompt": PROMPT, "max_tokens": 3, "temperature": 0, "logprobs": 2}
    r = post(server, body).json()
    lp = r["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == 3
    assert lp["text_offset"][0] == 0
    assert all(len(top) <= 2 for top in lp["top_logprobs"])
    assert "".join(lp["tokens"]) == r["choices"][0]["text"]
    for token, logprob, top in zip(
        lp["tokens"], lp["token_logprobs"], lp["top_logprobs"], strict=True
    ):
        assert logprob <= 0 and top[token] == logprob  # greedy: the chosen one is the top one
    events = stream(server, body)
    streamed = [
        t for c in events[:-1] for t in (c["choices"][0]["logprobs"] or {}).get("tokens", [])
    ]
    assert streamed == lp["tokens"]


def test_stop_and_length(server):
    r = post(server, {"prompt": "1, 2, 3, 4,", "max_tokens": 8, "temperature": 0, "stop": ["6"]})
    choice = r.json()["choices"][0]
    assert "6" not in choice["text"]
    assert choice["finish_reason"] == "stop"
    r = post(server, {"prompt": "1, 2, 3, 4,", "max_tokens": 2, "temperature": 0}).json()
    assert r["choices"][0]["finish_reason"] == "length" and r["usage"]["completion_tokens"] == 2


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"echo": True}, "Only no echo is supported"),
        ({"n": 5}, "Field 'n': Value must be between 1 <= value <= 4, but got 5"),
        ({"logprobs": 21}, "Field 'logprobs': Value must be between 0 <= value <= 20, but got 21"),
        (
            {"sse_ping_interval": 2**31},
            "Field 'sse_ping_interval': Value must be between -1 <= value <= 2147483647, "
            "but got 2147483648",
        ),
        ({"prompt": []}, "Field 'prompt': must not be empty"),
        ({"prompt": ""}, "Field 'prompt.0': must not be empty"),
    ],
)
def test_errors(server, patch, message):
    r = post(server, {"prompt": PROMPT, **patch})
    assert r.status_code == 400
    err = error_of(r)
    assert err["message"] == message and err["type"] == "invalid_request_error"


def test_more_errors(server):
    too_long = "x " * (server.state.engine.n_ctx_slot + 100)
    r = post(server, {"prompt": too_long})
    assert r.status_code == 400 and error_of(r)["type"] == "exceed_context_size_error"
    tokens = len(server.state.engine.model.tokenize(too_long))
    assert error_of(r)["n_prompt_tokens"] == tokens and error_of(r)["n_ctx"] < tokens
    r = post(server, {"prompt": [1, 2, 10**9]})
    assert r.status_code == 400 and "vocabulary" in error_of(r)["message"]
    r = post(server, {"prompt": {"not": "a prompt"}})
    assert r.status_code == 400 and "Field 'prompt" in error_of(r)["message"]
    r = post(server, {"prompt": PROMPT, "suffix": "end"})
    assert r.status_code == 400 and "suffix" in error_of(r)["message"]


def test_openapi(server):
    doc = httpx.get(server.url + "/openapi.json").json()
    assert "/v1/completions" in doc["paths"] and "/completions" not in doc["paths"]
    content = doc["paths"]["/v1/completions"]["post"]["responses"]["200"]["content"]
    assert "text/event-stream" in content
