"""`POST /v1/chat/completions`: OpenAI shapes (checked with the official SDK's types), streaming
framing, `n`, prompt caching, prefill/echo, sampling fields, structured output, SSE pings,
cancellation on disconnect, and the exact 400 messages of the spec.

Most tests run on the shared 4-slot `server`; tests that need an idle or tiny server start
their own with `run_server`. Generations are kept to a few tokens: the CI machine is small.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from llamactl.server.openai.chat import params, serving
from llamactl.server.openai.chat.protocol import ChatCompletionChunk as OurChunk
from llamactl.server.schema import inline_schema
from openai import OpenAI
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from serverkit import run_server

from llamactl.config import Settings
from llamactl.engine.types import (
    ContentDelta,
    Done,
    ReasoningDelta,
    Timings,
    ToolCallDelta,
    Usage,
)

HI = [{"role": "user", "content": "Say hello."}]


# ---------------------------------------------------------------------------- helpers


def client(live) -> OpenAI:
    return OpenAI(base_url=live.v1, api_key="x", max_retries=0)


def post(live, body: dict[str, Any], path: str = "/v1/chat/completions") -> httpx.Response:
    return httpx.post(live.url + path, json=body, timeout=120)


def sse_events(live, body: dict[str, Any]) -> tuple[list[Any], list[str]]:
    """Every `data:` payload (JSON, or the string "[DONE]") and the raw lines of a stream."""
    events: list[Any] = []
    lines: list[str] = []
    with httpx.stream(
        "POST", live.v1 + "/chat/completions", json={**body, "stream": True}, timeout=120
    ) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            lines.append(line)
            if line.startswith("data: "):
                data = line[6:]
                events.append(data if data == "[DONE]" else json.loads(data))
    return events, lines


def content_of(events: list[Any], index: int = 0, key: str = "content") -> str:
    return "".join(
        c["delta"].get(key) or ""
        for e in events
        if isinstance(e, dict)
        for c in e.get("choices", [])
        if c["index"] == index
    )


def eog_bias(live) -> dict[str, float]:
    """logit_bias that keeps the model from ending its turn (for long generations)."""
    model = live.state.engine.model
    return {str(t): -100 for t in range(256) if model.is_eog(t)}


def wait_until(predicate, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def error_of(r: httpx.Response) -> dict[str, Any]:
    body = r.json()
    assert set(body) == {"error"}, body
    # OpenAI's string code for a prompt over the context; else llama-server's: the status
    code = body["error"]["code"]
    assert code == r.status_code or (code == "context_length_exceeded" and r.status_code == 400)
    return body["error"]


# ---------------------------------------------------------------------------- non-stream


def test_non_stream_shape(server):
    r = client(server).chat.completions.create(
        model=server.state.model_id, messages=HI, max_tokens=6, temperature=0
    )
    assert isinstance(r, ChatCompletion)
    assert r.id.startswith("chatcmpl-")
    assert r.object == "chat.completion"
    assert r.model == server.state.model_id
    assert r.system_fingerprint
    assert abs(r.created - time.time()) < 300
    [choice] = r.choices
    assert choice.index == 0 and choice.message.role == "assistant"
    assert choice.message.content and choice.finish_reason in ("stop", "length")
    assert choice.logprobs is None
    u = r.usage
    assert u.completion_tokens <= 6 and u.total_tokens == u.prompt_tokens + u.completion_tokens
    assert u.prompt_tokens_details.cached_tokens >= 0
    timings = r.model_extra["timings"]
    assert timings["predicted_n"] == u.completion_tokens
    assert timings["prompt_n"] + timings["cache_n"] == u.prompt_tokens


def test_paths_without_v1_and_model_optional(server):
    r = post(server, {"messages": HI, "max_tokens": 2}, path="/chat/completions")
    assert r.status_code == 200
    assert r.json()["object"] == "chat.completion"
    assert r.json()["model"] == server.state.model_id


def test_max_tokens_gives_length(server):
    r = post(
        server,
        {"messages": HI, "max_tokens": 3, "logit_bias": eog_bias(server), "temperature": 0},
    ).json()
    assert r["choices"][0]["finish_reason"] == "length"
    assert r["usage"]["completion_tokens"] == 3
    r = post(server, {"messages": HI, "max_completion_tokens": 2, "max_tokens": 9}).json()
    assert r["usage"]["completion_tokens"] <= 2  # the newer name wins


def test_stop_strings(server):
    body = {"messages": HI, "max_tokens": 12, "temperature": 0, "logit_bias": eog_bias(server)}
    full = post(server, body).json()["choices"][0]["message"]["content"]
    words = full.split()
    assert len(words) >= 3, full
    stop = " " + words[2]
    cut = full[: full.index(stop)]
    for stop_field in (stop, ["@@never@@", stop]):
        r = post(server, {**body, "stop": stop_field}).json()
        assert r["choices"][0]["message"]["content"] == cut
        assert r["choices"][0]["finish_reason"] == "stop"
    events, _ = sse_events(server, {**body, "stop": stop})
    assert content_of(events) == cut


def test_seed_makes_sampling_repeatable(server):
    body = {"messages": HI, "max_tokens": 8, "temperature": 1.0, "seed": 1234, "top_k": 50}
    a = post(server, body).json()["choices"][0]["message"]["content"]
    b = post(server, body).json()["choices"][0]["message"]["content"]
    assert a == b


# ---------------------------------------------------------------------------- stream


def test_stream_framing_and_usage(server):
    body = {"messages": HI, "max_tokens": 5, "stream_options": {"include_usage": True}}
    events, lines = sse_events(server, body)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    for chunk in chunks:
        ChatCompletionChunk.model_validate(chunk)
        OurChunk.model_validate(chunk)
        assert chunk["object"] == "chat.completion.chunk"
    assert len({c["id"] for c in chunks}) == 1 and chunks[0]["id"].startswith("chatcmpl-")
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    finish = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert len(finish) == 1 and finish[0]["choices"][0]["delta"] == {}
    assert "timings" in finish[0]
    last = chunks[-1]
    assert last["choices"] == [] and last["usage"]["completion_tokens"] >= 1
    assert last["usage"]["prompt_tokens_details"]["cached_tokens"] >= 0
    assert all(c["usage"] is None for c in chunks[:-1])
    # frames are `data: …` + blank line
    assert all(line == "" or line.startswith("data: ") for line in lines)


def test_stream_without_usage_has_no_usage_key(server):
    events, _ = sse_events(server, {"messages": HI, "max_tokens": 2})
    assert all("usage" not in e for e in events[:-1])
    assert events[-2]["choices"][0]["finish_reason"] in ("stop", "length")


def test_sdk_stream_matches_non_stream(server):
    c = client(server)
    body = {"model": server.state.model_id, "messages": HI, "max_tokens": 8, "temperature": 0}
    whole = c.chat.completions.create(**body).choices[0].message.content
    parts = [
        ch.choices[0].delta.content or ""
        for ch in c.chat.completions.create(**body, stream=True)
        if ch.choices
    ]
    assert "".join(parts) == whole


# ---------------------------------------------------------------------------- n


def test_n_choices_share_one_prompt_decode(server):
    engine = server.state.engine
    before = engine.stats.prompt_tokens_processed
    body = {
        "messages": [{"role": "user", "content": "Name a fruit. n-test"}],
        "max_tokens": 4,
        "n": 4,
        "seed": 7,
        "temperature": 1.0,
    }
    r = post(server, body).json()
    processed = engine.stats.prompt_tokens_processed - before
    assert [c["index"] for c in r["choices"]] == [0, 1, 2, 3]
    assert all(c["message"]["role"] == "assistant" for c in r["choices"])
    u = r["usage"]
    # the prompt is decoded once for all four choices, and counted once in usage
    assert processed == u["prompt_tokens"] - u["prompt_tokens_details"]["cached_tokens"]
    assert r["timings"]["prompt_n"] == processed
    assert u["completion_tokens"] == r["timings"]["predicted_n"]


def test_n_stream_indices_and_per_choice_timings(server):
    body = {
        "messages": [{"role": "user", "content": "Count. n-stream"}],
        "max_tokens": 3,
        "n": 3,
        "stream_options": {"include_usage": True},
    }
    events, _ = sse_events(server, body)
    chunks = events[:-1]
    assert len({c["id"] for c in chunks}) == 1
    roles = [
        c["choices"][0]["index"]
        for c in chunks
        if c["choices"] and "role" in c["choices"][0]["delta"]
    ]
    assert sorted(roles) == [0, 1, 2]
    finishes = {
        c["choices"][0]["index"]: c
        for c in chunks
        if c["choices"] and c["choices"][0]["finish_reason"]
    }
    assert sorted(finishes) == [0, 1, 2]
    # the parent decoded the prompt; its children report no prompt work of their own
    assert finishes[1]["timings"]["prompt_n"] == finishes[2]["timings"]["prompt_n"] == 0
    usage = chunks[-1]["usage"]
    assert (
        usage["prompt_tokens"]
        == finishes[0]["timings"]["prompt_n"] + (finishes[0]["timings"]["cache_n"])
    )


@pytest.mark.slow
def test_cached_tokens_pattern():
    """§12's pattern on an idle 1-slot server: 0, then all but the last token, then less."""
    with run_server(parallel=1) as live:
        cached, prompts = [], []
        for text in ("1 2 3 4 5 6", "1 2 3 4 5 6", "1 2 3 4 5 9", "1 2 3 9 9 9"):
            messages = [{"role": "system", "content": "Test"}, {"role": "user", "content": text}]
            u = post(live, {"messages": messages, "max_tokens": 1}).json()["usage"]
            cached.append(u["prompt_tokens_details"]["cached_tokens"])
            prompts.append(u["prompt_tokens"])
    assert len(set(prompts)) == 1
    n = prompts[0]
    assert cached[0] == 0
    assert cached[1] == n - 1
    assert n - 1 > cached[2] > cached[3] > 0


# ---------------------------------------------------------------------------- prefill / echo

PREFILL = [
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "The capital of France is"},
]


def test_prefill_continues_and_echo_includes_it(server):
    body = {"messages": PREFILL, "max_tokens": 4, "temperature": 0}
    plain = post(server, body).json()["choices"][0]["message"]["content"]
    assert not plain.startswith("The capital of France is")
    echoed = post(server, {**body, "echo": True}).json()["choices"][0]["message"]["content"]
    assert echoed.startswith("The capital of France is")
    events, _ = sse_events(server, {**body, "echo": True})
    assert content_of(events).startswith("The capital of France is")
    events, _ = sse_events(server, body)
    assert not content_of(events).startswith("The capital")


def test_prefill_explicit_forms(server):
    body = {"messages": PREFILL, "max_tokens": 2, "temperature": 0, "echo": True}
    prompt_sizes = []
    for value in (True, "content"):
        r = post(server, {**body, "continue_final_message": value})
        assert r.status_code == 200
        assert r.json()["choices"][0]["message"]["content"].startswith("The capital")
        prompt_sizes.append(r.json()["usage"]["prompt_tokens"])
    # continue_final_message false: the assistant turn is closed and a new one opens
    r = post(server, {**body, "continue_final_message": False}).json()
    assert r["usage"]["prompt_tokens"] > prompt_sizes[0] == prompt_sizes[1]


def test_prefill_errors(server):
    two = [*PREFILL, {"role": "assistant", "content": "Paris"}]
    r = post(server, {"messages": two})
    assert r.status_code == 400
    assert error_of(r)["message"] == (
        "Cannot have 2 or more assistant messages at the end of the list."
    )
    r = post(
        server,
        {"messages": PREFILL, "continue_final_message": True, "add_generation_prompt": True},
    )
    assert r.status_code == 400
    assert error_of(r)["message"] == (
        "Cannot set both add_generation_prompt and continue_final_message to true."
    )
    assert error_of(r)["type"] == "invalid_request_error"


# ---------------------------------------------------------------------------- sampling extras


def test_logprobs(server):
    r = client(server).chat.completions.create(
        model=server.state.model_id,
        messages=HI,
        max_tokens=4,
        temperature=0,
        logprobs=True,
        top_logprobs=3,
    )
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    for item in content:
        assert item.logprob <= 0 and len(item.top_logprobs) == 3
        assert bytes(item.bytes).decode("utf-8", "replace") == item.token
        # greedy: the chosen token is the most likely one
        assert item.top_logprobs[0].token == item.token
    if r.choices[0].finish_reason == "length":
        assert "".join(i.token for i in content) == r.choices[0].message.content
    events, _ = sse_events(
        server, {"messages": HI, "max_tokens": 3, "logprobs": True, "temperature": 0}
    )
    streamed = [
        item
        for e in events[:-1]
        for c in e["choices"]
        if c["logprobs"]
        for item in c["logprobs"]["content"]
    ]
    assert [i["token"] for i in streamed] == [i.token for i in content[:3]]
    assert all(i["top_logprobs"] == [] for i in streamed)


def test_json_schema_output_validates(server):
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "boolean"}, "count": {"type": "integer"}},
        "required": ["answer", "count"],
        "additionalProperties": False,
    }
    body = {
        "messages": [{"role": "user", "content": "Is the sky blue? Answer in JSON."}],
        "max_tokens": 40,
        "temperature": 0,
        "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": schema}},
    }
    r = post(server, body).json()
    data = json.loads(r["choices"][0]["message"]["content"])
    assert set(data) == {"answer", "count"}
    assert isinstance(data["answer"], bool)
    assert isinstance(data["count"], int) and not isinstance(data["count"], bool)
    # llama-server's extension: json_object with a schema
    fmt = {"type": "json_object", "schema": schema}
    r = post(server, {**body, "response_format": fmt}).json()
    assert set(json.loads(r["choices"][0]["message"]["content"])) == {"answer", "count"}
    # free-form JSON: constrained from the first character
    r = post(server, {**body, "max_tokens": 3, "response_format": {"type": "json_object"}})
    assert r.json()["choices"][0]["message"]["content"].lstrip().startswith("{")


def test_raw_grammar(server):
    body = {"messages": HI, "max_tokens": 5, "grammar": 'root ::= "yes" | "no"'}
    r = post(server, body).json()
    assert r["choices"][0]["message"]["content"] in ("yes", "no")


def test_reasoning_fields_on_thinking_template(thinking_server):
    bias = eog_bias(thinking_server)
    body = {"messages": HI, "max_tokens": 12, "temperature": 0, "logit_bias": bias}
    r = post(thinking_server, body).json()
    assert r["choices"][0]["message"]["reasoning_content"]
    if hasattr(Usage(), "reasoning_tokens"):  # counted by the engine
        u = r["usage"]
        assert 0 < u["completion_tokens_details"]["reasoning_tokens"] <= u["completion_tokens"]
    # thinking off: the template closes the block; all output is content
    for off in ({"reasoning_effort": "none"}, {"chat_template_kwargs": {"enable_thinking": False}}):
        r = post(thinking_server, {**body, **off}).json()
        message = r["choices"][0]["message"]
        assert "reasoning_content" not in message and message["content"]
    # a budget forces the end of thinking; the answer follows
    r = post(thinking_server, {**body, "thinking_budget_tokens": 3, "max_tokens": 16}).json()
    message = r["choices"][0]["message"]
    assert message["reasoning_content"] and message["content"]
    events, _ = sse_events(thinking_server, {**body, "max_tokens": 4})
    assert content_of(events, key="reasoning_content")


def test_reasoning_prefill_continues_reasoning(thinking_server):
    messages = [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "reasoning_content": "The user asks"},
    ]
    body = {"messages": messages, "max_tokens": 4, "temperature": 0, "echo": True}
    body["continue_final_message"] = "reasoning_content"
    r = post(thinking_server, body).json()
    assert r["choices"][0]["message"]["reasoning_content"].startswith("The user asks")
    r = post(thinking_server, {**body, "echo": False}).json()
    assert not r["choices"][0]["message"].get("reasoning_content", "").startswith("The user")


# ---------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"n": 5}, "Field 'n': Value must be between 1 <= value <= 4, but got 5"),
        ({"n": 0}, "Field 'n': Value must be between 1 <= value <= 4, but got 0"),
        ({"n_cmpl": 9}, "Field 'n_cmpl': Value must be between 1 <= value <= 4, but got 9"),
        (
            {"sse_ping_interval": -2},
            "Field 'sse_ping_interval': Value must be between -1 <= value <= 2147483647, "
            "but got -2",
        ),
        (
            {"top_logprobs": 21, "logprobs": True},
            "Field 'top_logprobs': Value must be between 0 <= value <= 20, but got 21",
        ),
        ({"top_logprobs": 2}, "Field 'top_logprobs': requires 'logprobs' to be true"),
        (
            {"temperature": 3},
            "Field 'temperature': Value must be between 0.0 <= value <= 2.0, but got 3.0",
        ),
    ],
)
def test_field_errors(server, patch, message):
    r = post(server, {"messages": HI, **patch})
    assert r.status_code == 400
    err = error_of(r)
    assert err["message"] == message and err["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"temperature": "hot"}, "temperature"),
        ({"messages": "hi"}, "messages"),
        ({"messages": [{"content": "no role"}]}, "messages.0.role"),
        ({"reasoning_effort": "extreme"}, "reasoning_effort"),
        ({"stream_options": {"include_usage": "maybe"}}, "stream_options.include_usage"),
        ({"max_tokens": 0}, "max_tokens"),
    ],
)
def test_wrong_types_name_the_field(server, patch, field):
    r = post(server, {"messages": HI, **patch})
    assert r.status_code == 400
    assert f"Field '{field}'" in error_of(r)["message"]


def test_request_errors(server):
    r = httpx.post(
        server.v1 + "/chat/completions",
        content=b'{"messages": [',
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 400 and "JSON" in error_of(r)["message"]
    too_long = "x " * (server.state.engine.n_ctx_slot + 100)
    r = post(server, {"messages": [{"role": "user", "content": too_long}]})
    assert r.status_code == 400
    assert error_of(r)["type"] == "exceed_context_size_error"
    assert error_of(r)["n_ctx"] == server.state.engine.n_ctx_slot  # llama-server's fields
    assert error_of(r)["n_prompt_tokens"] > error_of(r)["n_ctx"]
    fmt = {"type": "json_object"}
    r = post(server, {"messages": HI, "grammar": 'root ::= "a"', "response_format": fmt})
    assert r.status_code == 400 and "'grammar'" in error_of(r)["message"]
    r = post(server, {"messages": []})
    assert r.status_code == 400
    tool = {"type": "function", "function": {"name": "get_time", "parameters": {}}}
    choice = {"type": "function", "function": {"name": "nope"}}
    r = post(server, {"messages": HI, "tools": [tool], "tool_choice": choice})
    assert r.status_code == 400
    assert error_of(r)["message"] == "Field 'tool_choice': no tool named 'nope' in 'tools'"


def test_openapi_documents_chat(server):
    doc = httpx.get(server.url + "/openapi.json").json()
    assert "/v1/chat/completions" in doc["paths"]
    assert "/chat/completions" not in doc["paths"]
    op = doc["paths"]["/v1/chat/completions"]["post"]
    ok = op["responses"]["200"]["content"]
    assert "text/event-stream" in ok and "application/json" in ok
    props = doc["components"]["schemas"]["ChatCompletionRequest"]["properties"]
    for name in ("messages", "n", "reasoning_control", "sse_ping_interval", "echo", "tools"):
        assert props[name].get("description") or name == "tools", name
    # every $ref resolves
    text = json.dumps(doc)
    for ref in {part.split('"')[0] for part in text.split('"$ref": "')[1:]}:
        assert ref.removeprefix("#/components/schemas/") in doc["components"]["schemas"], ref
    assert "$ref" not in json.dumps(inline_schema(OurChunk))


# ---------------------------------------------------------------------------- concurrency


@pytest.mark.slow
def test_eight_concurrent_streams_equal_solo():
    prompts = [f"Write one word about the number {i}." for i in range(8)]
    with run_server(parallel=8, n_ctx=8 * 512) as live:

        def run(text: str) -> str:
            body = {"messages": [{"role": "user", "content": text}], "max_tokens": 8}
            events, _ = sse_events(live, {**body, "temperature": 0})
            return content_of(events)

        solo = [run(p) for p in prompts]
        results: list[str | None] = [None] * 8
        barrier = threading.Barrier(8)

        def worker(i: int) -> None:
            barrier.wait()
            results[i] = run(prompts[i])

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    assert results == solo


@pytest.mark.slow
def test_disconnect_frees_slot_and_pings_while_queued():
    """On a 1-slot server: a queued stream gets `:` pings, a full queue answers 503, and
    a client that leaves (stream or not) frees its slot."""
    with run_server(parallel=1, max_queue=1) as live:
        engine = live.state.engine
        long_body = {
            "messages": HI,
            "max_tokens": 2000,
            "logit_bias": eog_bias(live),
            "stream": True,
        }
        a_client = httpx.Client(timeout=60)
        with a_client, a_client.stream("POST", live.v1 + "/chat/completions", json=long_body) as a:
            a_lines = a.iter_lines()
            while '"content":"' not in next(a_lines):
                pass
            assert engine.busy_slots == 1
            b_body = {"messages": HI, "max_tokens": 2, "stream": True, "sse_ping_interval": 1}
            with (
                httpx.Client(timeout=60) as b_client,
                b_client.stream("POST", live.v1 + "/chat/completions", json=b_body) as b,
            ):
                b_lines = b.iter_lines()
                seen = [next(b_lines)]
                while ":" not in seen:
                    seen.append(next(b_lines))
                # B waits in the queue (max_queue=1): one more is refused
                c = post(live, {"messages": HI, "max_tokens": 1})
                assert c.status_code == 503 and error_of(c)["type"] == "unavailable_error"
                a.close()  # the client leaves: its generation stops, B gets the slot
                rest = list(b_lines)
                assert "data: [DONE]" in rest
        assert wait_until(lambda: engine.busy_slots == 0)
        # a non-streamed request whose client gives up is cancelled too
        body = {k: v for k, v in long_body.items() if k != "stream"}
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(live.v1 + "/chat/completions", json=body, timeout=1.5)
        assert wait_until(lambda: engine.busy_slots == 0)


# ---------------------------------------------------------------------------- unit: assembly


class FakeStream:
    """Stands in for ChatStream: replays chat events (e.g. tool calls from a future parser)."""

    def __init__(self, events: list[Any]) -> None:
        self._events = events
        self.raw = SimpleNamespace(finished=False)
        self.cancelled = False

    async def __aiter__(self):
        for event in self._events:
            yield event
        self.raw.finished = True

    def cancel(self) -> None:
        self.cancelled = True


class FakeState:
    def __init__(self) -> None:
        self.unregistered: list[str] = []

    def unregister(self, completion_id: str, stream: Any) -> None:
        self.unregistered.append(completion_id)


def done(index: int = 0, reason: str = "stop", prompt_n: int = 10, generated: int = 3) -> Done:
    return Done(
        reason,  # type: ignore[arg-type]
        Usage(prompt_tokens=12, cached_tokens=2, completion_tokens=generated),
        Timings(
            prompt_n=prompt_n, prompt_ms=5.0, predicted_n=generated, predicted_ms=9.0, cache_n=2
        ),
        index=index,
    )


TOOL_EVENTS = [
    ReasoningDelta("I should look it up.", 0),
    ContentDelta("Checking.", 0),
    ToolCallDelta(0, "call_1", "get_weather", '{"city": "Paris"}', 0),
    ToolCallDelta(1, "call_2", "get_time", "{}", 0),
    done(),
]


def job_for(events: list[Any], **kw: Any) -> serving.ChatJob:
    fields = {
        "id": "chatcmpl-test",
        "created": 1,
        "model": "m",
        "fingerprint": "fp",
        "n": 1,
        "include_usage": True,
        "logprobs": False,
    }
    fields.update(kw)
    return serving.ChatJob(stream=FakeStream(events), **fields)  # type: ignore[arg-type]


async def _collect(gen) -> list[str]:
    return [frame async for frame in gen]


def test_unit_tool_calls_stream_shape():
    state = FakeState()
    job = job_for(TOOL_EVENTS)
    frames = asyncio.run(_collect(serving.stream_frames(state, job)))  # type: ignore[arg-type]
    assert frames[-1] == "data: [DONE]\n\n"
    chunks = [json.loads(f[6:]) for f in frames[:-1]]
    for chunk in chunks:
        ChatCompletionChunk.model_validate(chunk)
    calls = [
        c["choices"][0]["delta"]["tool_calls"][0]
        for c in chunks
        if c["choices"] and "tool_calls" in c["choices"][0]["delta"]
    ]
    assert calls == [
        {
            "index": 0,
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
        },
        {
            "index": 1,
            "id": "call_2",
            "type": "function",
            "function": {"name": "get_time", "arguments": "{}"},
        },
    ]
    finish = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert finish[0]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[-1]["usage"] == {
        "prompt_tokens": 12,
        "completion_tokens": 3,
        "total_tokens": 15,
        "prompt_tokens_details": {"cached_tokens": 2},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }
    assert job.stream.cancelled and state.unregistered == ["chatcmpl-test"]


def test_unit_tool_calls_non_stream_shape():
    request = SimpleNamespace(receive=asyncio.Event().wait)  # a client that stays
    job = job_for(TOOL_EVENTS)
    body = asyncio.run(serving.complete(FakeState(), job, request))  # type: ignore[arg-type]
    ChatCompletion.model_validate(body)
    [choice] = body["choices"]
    assert choice["finish_reason"] == "tool_calls"
    message = choice["message"]
    assert message["reasoning_content"] == "I should look it up."
    assert message["content"] == "Checking."
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["get_weather", "get_time"]
    assert message["tool_calls"][0] == {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
    # a tool call with no text: content is null, as OpenAI sends it
    job = job_for([ToolCallDelta(0, "c", "f", "{}", 0), done()])
    body = asyncio.run(serving.complete(FakeState(), job, request))  # type: ignore[arg-type]
    assert body["choices"][0]["message"]["content"] is None


def test_unit_error_mid_stream_is_one_event():
    from llamactl.core.errors import LlamactlError

    class Failing(FakeStream):
        async def __aiter__(self):
            yield ContentDelta("partial", 0)
            raise LlamactlError("llama_decode failed (code 1); the request was ended")

    job = job_for([])
    job.stream = Failing([])  # type: ignore[assignment]
    frames = asyncio.run(_collect(serving.stream_frames(FakeState(), job)))  # type: ignore[arg-type]
    assert json.loads(frames[-1][6:]) == {
        "error": {
            "code": 500,
            "message": "llama_decode failed (code 1); the request was ended",
            "type": "server_error",
        }
    }
    assert "data: [DONE]\n\n" not in frames


def test_unit_params():
    assert params.token_limit("max_tokens", None, 7) == 7
    assert params.token_limit("max_tokens", -1, 7) is None
    state = SimpleNamespace(settings=Settings())
    assert params.stop_strings(state, "x") == ("x",)
    assert params.stop_strings(state, ["a", "", "b"] + ["c"] * 10) == ("a", "b", *["c"] * 10)
    assert params.check_top_logprobs(True, None) == 0
    assert params.check_top_logprobs(False, None) is None
    parent, child = done(0, prompt_n=10), done(1, prompt_n=0)
    t = params.timings_of([[parent, child]])
    assert t["prompt_n"] == 10 and t["predicted_n"] == 6 and t["cache_n"] == 2
    u = params.usage_of([[parent, child]])
    assert u["prompt_tokens"] == 12 and u["completion_tokens"] == 6
    assert params.finish_reason(done(reason="cancelled")) == "stop"
    assert params.finish_reason(done(reason="length"), True) == "length"


@pytest.mark.parametrize("family", ["chat", "responses", "anthropic"])
def test_server_wide_reasoning_flags(thinking_server, family):
    """`--reasoning off` / `--reasoning-budget N` decide what a request leaves open, in every
    API family; a request that says otherwise wins."""
    import dataclasses

    bias = eog_bias(thinking_server)
    state = thinking_server.state
    saved = state.settings

    def reasoning_and_content(extra: dict) -> tuple[str, str]:
        if family == "chat":
            body = {"messages": HI, "max_tokens": 16, "temperature": 0, "logit_bias": bias}
            m = post(thinking_server, {**body, **extra}).json()["choices"][0]["message"]
            return m.get("reasoning_content") or "", m.get("content") or ""
        if family == "responses":
            body = {"input": "Hi", "max_output_tokens": 16, "temperature": 0, **extra}
            out = httpx.post(thinking_server.v1 + "/responses", json=body, timeout=120).json()
            kinds = {o["type"]: o for o in out["output"]}
            text = kinds["message"]["content"][0]["text"] if "message" in kinds else ""
            return ("x" if "reasoning" in kinds else ""), text
        body = {"model": state.model_id, "messages": HI, "max_tokens": 16, "temperature": 0}
        out = httpx.post(thinking_server.url + "/v1/messages", json={**body, **extra}, timeout=120)
        blocks = {b["type"]: b for b in out.json()["content"]}
        return blocks.get("thinking", {}).get("thinking", ""), blocks.get("text", {}).get(
            "text", ""
        )

    try:
        assert reasoning_and_content({})[0]  # the template reasons by default
        state.settings = dataclasses.replace(saved, reasoning="off")
        reasoning, content = reasoning_and_content({})
        assert not reasoning and content
        if family == "chat":
            on = {"chat_template_kwargs": {"enable_thinking": True}}
            assert reasoning_and_content(on)[0]  # the request wins
        state.settings = dataclasses.replace(saved, reasoning_budget=2)
        reasoning, content = reasoning_and_content({})
        assert reasoning and content  # the budget ended the reasoning early
    finally:
        state.settings = saved


def test_server_wide_reasoning_format(thinking_server):
    """`--reasoning-format`: auto splits the reasoning out; none leaves the raw output (markers
    and all) in content; deepseek-legacy does both; a request's `reasoning_format` wins;
    streamed deltas add up to the same message."""
    import dataclasses

    state = thinking_server.state
    saved = state.settings
    body = {
        "messages": HI,
        "max_tokens": 24,
        "temperature": 0,
        "reasoning_budget": 6,  # the reasoning ends and an answer follows
        "logit_bias": eog_bias(thinking_server),
    }

    def message(extra: dict | None = None) -> dict:
        return post(thinking_server, {**body, **(extra or {})}).json()["choices"][0]["message"]

    def streamed(extra: dict | None = None) -> tuple[str, str]:
        events, _ = sse_events(thinking_server, {**body, **(extra or {}), "stream": True})
        deltas = [e["choices"][0]["delta"] for e in events if e != "[DONE]" and e["choices"]]
        return (
            "".join(d.get("reasoning_content") or "" for d in deltas),
            "".join(d.get("content") or "" for d in deltas),
        )

    try:
        split = message()
        reasoning, answer = split["reasoning_content"], split["content"]
        assert reasoning and answer and "</think>" not in answer
        state.settings = dataclasses.replace(saved, reasoning_format="none")
        raw = message()
        assert "reasoning_content" not in raw
        assert raw["content"].lstrip().startswith(reasoning) and "</think>" in raw["content"]
        assert raw["content"].rstrip().endswith(answer)
        assert message({"reasoning_format": "deepseek"}) == split  # the request wins
        state.settings = dataclasses.replace(saved, reasoning_format="deepseek-legacy")
        legacy = message()
        assert legacy["reasoning_content"] == reasoning
        assert legacy["content"] == "<think>" + raw["content"]  # the prompt opened the block
        assert streamed() == (legacy["reasoning_content"], legacy["content"])
        assert streamed({"reasoning_format": "none"}) == ("", raw["content"])
    finally:
        state.settings = saved


def test_server_wide_chat_template_kwargs(thinking_server):
    """`--chat-template-kwargs` gives every chat its variables; a request's own win."""
    state = thinking_server.state
    body = {"messages": HI, "max_tokens": 8, "temperature": 0}
    try:
        state.template_kwargs = {"enable_thinking": False}
        off = post(thinking_server, body).json()["choices"][0]["message"]
        assert "reasoning_content" not in off and off["content"]
        on = {**body, "chat_template_kwargs": {"enable_thinking": True}}
        assert post(thinking_server, on).json()["choices"][0]["message"]["reasoning_content"]
    finally:
        state.template_kwargs = {}


def test_chat_template_kwargs_flag_must_be_a_json_object():
    from llamactl.config import load_settings
    from llamactl.core.errors import ConfigError
    from llamactl.engine_settings import chat_template_kwargs

    assert chat_template_kwargs(load_settings({"chat_template_kwargs": '{"a": 1}'})) == {"a": 1}
    for bad in ("[1]", "{nope"):
        with pytest.raises(ConfigError, match="chat_template_kwargs"):
            chat_template_kwargs(load_settings({"chat_template_kwargs": bad}))


def test_chat_template_chatml_by_name():
    from llamactl.config import load_settings
    from llamactl.engine.chat import CHATML_TEMPLATE
    from llamactl.engine_settings import chat_template

    assert chat_template(load_settings({"chat_template": "chatml"})) == CHATML_TEMPLATE
    jinja = "{% for m in messages %}{{ m.content }}{% endfor %}"
    assert chat_template(load_settings({"chat_template": jinja})) == jinja
    assert chat_template(load_settings({})) is None
