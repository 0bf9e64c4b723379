"""Anthropic Messages API (`/v1/messages`): the official SDK and raw SSE against the real server,
plus the block mapping fed with synthetic chat events (tool calls need no model)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
from concurrent.futures import ThreadPoolExecutor

import anthropic
import httpx
import pytest
from llamactl.server.anthropic.messages.blocks import thinking_signature
from llamactl.server.anthropic.messages.convert import chat_messages
from llamactl.server.anthropic.messages.protocol import CountTokensRequest, MessagesRequest
from llamactl.server.anthropic.messages.serving import (
    Reply,
    chat_request,
    message,
    prompt_request,
    stream_frames,
)
from llamactl.server.errors import APIError
from serverkit import run_server

from llamactl.core.errors import LlamactlError
from llamactl.engine.types import (
    ContentDelta,
    Done,
    ReasoningDelta,
    Timings,
    ToolCallDelta,
    Usage,
)

try:
    import httpx2
except ImportError:  # SDKs before the switch to httpx2
    httpx2 = None

HELLO = [{"role": "user", "content": "Say hello."}]
# Current SDKs dropped the sampling parameters from their signatures; the server still takes them.
GREEDY = {"extra_body": {"temperature": 0}}
LONG = [{"role": "user", "content": "Write a very long story about the sea."}]  # 600+ tokens


def client(live) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=live.url, api_key="x", max_retries=0, timeout=120)


def model_of(live) -> str:
    return live.state.model_id


def sse_events(raw: str) -> list[tuple[str, dict]]:
    """(event name, data) of each frame; asserts the framing Anthropic clients parse."""
    assert raw.endswith("\n\n")
    events = []
    for frame in raw.split("\n\n")[:-1]:
        if frame == ":":  # idle ping comment
            continue
        name_line, data_line = frame.split("\n")
        assert name_line.startswith("event: ") and data_line.startswith("data: ")
        name, data = name_line[7:], json.loads(data_line[6:])
        assert data["type"] == name
        events.append((name, data))
    return events


def post_stream(live, body: dict) -> list[tuple[str, dict]]:
    with httpx.stream("POST", live.url + "/v1/messages", json=body, timeout=120) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        return sse_events(r.read().decode())


def body_for(live, **fields) -> dict:
    return {"model": model_of(live), "max_tokens": 12, "messages": HELLO, "temperature": 0} | fields


# --------------------------------------------------------------------------- block mapping
def run_frames(events, reply: Reply) -> list[tuple[str, dict]]:
    async def go() -> str:
        async def source():
            for event in events:
                if isinstance(event, Exception):
                    raise event
                yield event

        return "".join([frame async for frame in stream_frames(source(), reply)])

    return sse_events(asyncio.run(go()))


def run_message(events, reply: Reply):
    async def source():
        for event in events:
            yield event

    return asyncio.run(message(source(), reply))


REPLY = Reply(id="msg_test", model="m", prompt_tokens=10, max_tokens=50, stop_sequences=("END",))
DONE = Done("stop", Usage(prompt_tokens=10, cached_tokens=4, completion_tokens=9), Timings())
TOOL_EVENTS = [
    ReasoningDelta("Need the weather."),
    ContentDelta("Let me check."),
    ToolCallDelta(0, "call_1", "get_weather", '{"city": "Paris"}'),
    ToolCallDelta(1, "toolu_keep", "get_time", "not json"),
    DONE,
]


def test_tool_calls_stream_as_tool_use_blocks_after_thinking_and_text():
    events = run_frames(TOOL_EVENTS, REPLY)
    names = [name for name, _ in events]
    assert names == [
        "message_start",
        "ping",
        "content_block_start",  # 0 thinking
        "content_block_delta",
        "content_block_delta",  # signature
        "content_block_stop",
        "content_block_start",  # 1 text
        "content_block_delta",
        "content_block_stop",
        "content_block_start",  # 2 tool_use
        "content_block_delta",
        "content_block_stop",
        "content_block_start",  # 3 tool_use
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    starts = [data for name, data in events if name == "content_block_start"]
    assert [s["index"] for s in starts] == [0, 1, 2, 3]
    first_tool, second_tool = starts[2]["content_block"], starts[3]["content_block"]
    assert first_tool["type"] == "tool_use" and first_tool["name"] == "get_weather"
    assert first_tool["id"].startswith("toolu_") and first_tool["input"] == {}
    assert second_tool["id"] == "toolu_keep"
    partials = [
        d["delta"]["partial_json"]
        for n, d in events
        if n == "content_block_delta" and d["delta"]["type"] == "input_json_delta"
    ]
    assert [json.loads(p) for p in partials] == [{"city": "Paris"}, {}]
    signature = events[4][1]["delta"]
    assert signature == {
        "type": "signature_delta",
        "signature": thinking_signature("Need the weather."),
    }
    delta = events[-2][1]
    assert delta["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert delta["usage"]["output_tokens"] == 9
    assert delta["usage"]["input_tokens"] == 6 and delta["usage"]["cache_read_input_tokens"] == 4


def test_tool_calls_non_stream_match_the_stream():
    msg = run_message(TOOL_EVENTS, REPLY)
    assert [b.type for b in msg.content] == ["thinking", "text", "tool_use", "tool_use"]
    assert msg.content[0].thinking == "Need the weather."
    assert msg.content[2].input == {"city": "Paris"} and msg.content[2].id.startswith("toolu_")
    assert msg.content[3].input == {}
    assert msg.stop_reason == "tool_use" and msg.stop_sequence is None
    assert msg.usage.model_dump() == {
        "input_tokens": 6,
        "output_tokens": 9,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 4,
    }


def test_sdk_accumulates_a_synthetic_tool_stream():
    """The official SDK's stream helper rebuilds the same message from our frames."""
    raw = "".join(
        f"event: {name}\ndata: {json.dumps(data)}\n\n"
        for name, data in run_frames(TOOL_EVENTS, REPLY)
    )

    # the SDK's own HTTP package: `httpx2` in newer releases, `httpx` before
    transport_lib = httpx2 if httpx2 is not None else httpx

    def handler(request):
        return transport_lib.Response(200, text=raw, headers={"content-type": "text/event-stream"})

    sdk = anthropic.Anthropic(
        api_key="x",
        base_url="http://test",
        http_client=transport_lib.Client(transport=transport_lib.MockTransport(handler)),
    )
    with sdk.messages.stream(model="m", max_tokens=50, messages=HELLO) as stream:
        final = stream.get_final_message()
    assert [b.type for b in final.content] == ["thinking", "text", "tool_use", "tool_use"]
    assert final.content[2].input == {"city": "Paris"}
    assert final.content[0].signature == thinking_signature("Need the weather.")
    assert final.stop_reason == "tool_use"
    assert final.usage.input_tokens == 6 and final.usage.cache_read_input_tokens == 4


def test_stop_reasons():
    length = Done("length", Usage(10, 0, 50), Timings())
    assert run_message([length], REPLY).stop_reason == "max_tokens"
    short = Done("length", Usage(10, 0, 20), Timings())  # the context ran out first
    assert run_message([short], REPLY).stop_reason == "model_context_window_exceeded"
    user_stop = Done("stop", Usage(10, 0, 3), Timings(), stop_string="END")
    msg = run_message([ContentDelta("a"), user_stop], REPLY)
    assert (msg.stop_reason, msg.stop_sequence) == ("stop_sequence", "END")
    other_stop = Done("stop", Usage(10, 0, 3), Timings(), stop_string="<|im_end|>")
    msg = run_message([other_stop], REPLY)
    assert (msg.stop_reason, msg.stop_sequence, msg.content) == ("end_turn", None, [])


def test_thinking_disabled_or_omitted():
    events = [ReasoningDelta("secret"), ContentDelta("hi"), DONE]
    hidden = dataclasses.replace(REPLY, keep_thinking=False)
    assert [b.type for b in run_message(events, hidden).content] == ["text"]
    omitted = dataclasses.replace(REPLY, omit_thinking_text=True)
    block = run_message(events, omitted).content[0]
    assert block.thinking == "" and block.signature == thinking_signature("secret")
    frames = run_frames(events, omitted)
    assert not any(d.get("delta", {}).get("type") == "thinking_delta" for _, d in frames)


def test_error_mid_stream_is_an_error_event():
    events = run_frames([ContentDelta("partial"), LlamactlError("decode failed")], REPLY)
    name, data = events[-1]
    assert name == "error"
    assert data == {"type": "error", "error": {"type": "api_error", "message": "decode failed"}}
    assert "message_stop" not in [n for n, _ in events]


# ------------------------------------------------------------------------- request mapping
def test_anthropic_blocks_map_to_chat_messages():
    req = CountTokensRequest.model_validate(
        {
            "model": "m",
            "system": [{"type": "text", "text": "Be brief."}],
            "messages": [
                {"role": "user", "content": "Weather?"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "Use the tool.", "signature": "s"},
                        {"type": "redacted_thinking", "data": "opaque"},
                        {"type": "text", "text": "Checking."},
                        {"type": "tool_use", "id": "toolu_1", "name": "wx", "input": {"c": 1}},
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "Thanks"},
                        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
                    ],
                },
            ],
        }
    )
    out = chat_messages(req)
    assert out[0] == {"role": "system", "content": "Be brief."}
    assistant = out[2]
    assert assistant["reasoning_content"] == "Use the tool."
    assert assistant["content"] == "Checking."
    call = assistant["tool_calls"][0]
    assert call["id"] == "toolu_1" and call["function"]["name"] == "wx"
    assert json.loads(call["function"]["arguments"]) == {"c": 1}
    assert out[3] == {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny", "name": "wx"}
    assert out[4] == {"role": "user", "content": "Thanks"}


def test_tools_and_tool_choice_map_to_openai_shapes():
    tools = [{"name": "wx", "description": "Weather", "input_schema": {"type": "object"}}]
    base = {"model": "m", "messages": HELLO, "tools": tools}
    chat = prompt_request(CountTokensRequest.model_validate(base))
    assert chat.tools == [
        {
            "type": "function",
            "function": {"name": "wx", "parameters": {"type": "object"}, "description": "Weather"},
        }
    ]
    none = CountTokensRequest.model_validate(base | {"tool_choice": {"type": "none"}})
    assert prompt_request(none).tools is None
    unknown = CountTokensRequest.model_validate(
        base | {"tool_choice": {"type": "tool", "name": "nope"}}
    )
    with pytest.raises(APIError, match="tool_choice.name"):
        prompt_request(unknown)


def test_thinking_maps_to_template_toggle_and_budget():
    def plan(thinking):
        return prompt_request(
            CountTokensRequest.model_validate(
                {"model": "m", "messages": HELLO, "thinking": thinking}
            )
        )

    enabled = plan({"type": "enabled", "budget_tokens": 7})
    assert (enabled.enable_thinking, enabled.reasoning_budget) == (True, 7)
    assert plan({"type": "enabled"}).reasoning_budget == 10000
    disabled = plan({"type": "disabled"})
    assert (disabled.enable_thinking, disabled.reasoning_budget) == (False, 0)
    default = plan(None)
    assert (default.enable_thinking, default.reasoning_budget) == (None, None)


# ------------------------------------------------------------------------------ live: text
def test_sdk_text_non_stream_and_stream_agree(server):
    sdk = client(server)
    msg = sdk.messages.create(model=model_of(server), max_tokens=12, messages=HELLO, **GREEDY)
    assert msg.id.startswith("msg_") and msg.type == "message" and msg.role == "assistant"
    assert msg.model == model_of(server)
    assert [b.type for b in msg.content] == ["text"] and msg.content[0].text
    assert msg.stop_reason in ("end_turn", "max_tokens")
    assert msg.usage.output_tokens > 0
    with sdk.messages.stream(
        model=model_of(server), max_tokens=12, messages=HELLO, **GREEDY
    ) as stream:
        streamed = stream.get_final_message()
    assert streamed.content[0].text == msg.content[0].text
    assert streamed.usage.output_tokens == msg.usage.output_tokens
    assert streamed.stop_reason == msg.stop_reason


def test_raw_stream_event_order_and_framing(server):
    with httpx.stream(
        "POST", server.url + "/v1/messages", json=body_for(server, stream=True), timeout=120
    ) as r:
        raw = r.read().decode()
    assert "[DONE]" not in raw
    events = sse_events(raw)
    names = [n for n, _ in events]
    assert names[:4] == ["message_start", "ping", "content_block_start", "content_block_delta"]
    assert names[-4:] == [
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert set(names[3:-3]) == {"content_block_delta"}
    start = events[0][1]["message"]
    assert start["content"] == [] and start["stop_reason"] is None
    assert start["usage"]["output_tokens"] == 0
    assert set(start["usage"]) >= {"input_tokens", "cache_read_input_tokens"}
    assert events[2][1] == {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "text", "text": ""},
    }
    assert all(d["delta"]["type"] == "text_delta" for n, d in events if n == "content_block_delta")
    end = events[-2][1]
    assert end["delta"]["stop_reason"] in ("end_turn", "max_tokens")
    assert end["usage"]["output_tokens"] > 0


def test_alias_path(server):
    r = httpx.post(server.url + "/messages", json=body_for(server), timeout=120)
    assert r.status_code == 200 and r.json()["type"] == "message"


# -------------------------------------------------------------------------- live: thinking
THINK = {"type": "enabled", "budget_tokens": 4}


def test_thinking_stream_blocks(thinking_server):
    events = post_stream(
        thinking_server, body_for(thinking_server, max_tokens=24, thinking=THINK, stream=True)
    )
    starts = [d for n, d in events if n == "content_block_start"]
    assert starts[0]["index"] == 0
    assert starts[0]["content_block"] == {"type": "thinking", "thinking": "", "signature": ""}
    assert starts[1]["index"] == 1 and starts[1]["content_block"]["type"] == "text"
    deltas = [(d["index"], d["delta"]) for n, d in events if n == "content_block_delta"]
    thinking = "".join(d["thinking"] for i, d in deltas if d["type"] == "thinking_delta")
    assert thinking
    signatures = [(i, d["signature"]) for i, d in deltas if d["type"] == "signature_delta"]
    assert signatures == [(0, thinking_signature(thinking))]
    # the signature closes block 0 before block 1 starts
    names = [(n, d.get("index")) for n, d in events]
    sig_at = next(k for k, (n, d) in enumerate(events) if d.get("delta", {}).get("signature"))
    assert names[sig_at + 1] == ("content_block_stop", 0)
    assert names[sig_at + 2] == ("content_block_start", 1)
    assert any(d["type"] == "text_delta" and i == 1 for i, d in deltas)


def test_thinking_non_stream_blocks(thinking_server):
    msg = client(thinking_server).messages.create(
        model=model_of(thinking_server),
        max_tokens=24,
        messages=HELLO,
        **GREEDY,
        thinking=THINK,
    )
    assert len(msg.content) >= 2
    thinking, text = msg.content[0], msg.content[1]
    assert thinking.type == "thinking" and thinking.thinking.strip()
    assert thinking.signature == thinking_signature(thinking.thinking)
    assert text.type == "text" and text.text


def test_thinking_disabled_has_no_thinking_block(thinking_server):
    msg = client(thinking_server).messages.create(
        model=model_of(thinking_server),
        max_tokens=12,
        messages=HELLO,
        **GREEDY,
        thinking={"type": "disabled"},
    )
    assert [b.type for b in msg.content] == ["text"]


def test_history_thinking_counts_and_renders(thinking_server):
    sdk = client(thinking_server)
    model = model_of(thinking_server)
    thought = "The user greets me; a short greeting back is right."
    history = [
        {"role": "user", "content": "Hi"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": thought, "signature": "x"},
                {"type": "text", "text": "Hello!"},
            ],
        },
        {"role": "user", "content": "How are you?"},
    ]
    plain = [history[0], {"role": "assistant", "content": "Hello!"}, history[2]]
    with_thought = sdk.messages.count_tokens(model=model, messages=history).input_tokens
    without = sdk.messages.count_tokens(model=model, messages=plain).input_tokens
    assert with_thought > without + 5
    req = CountTokensRequest.model_validate({"model": model, "messages": history})
    rendered = thinking_server.state.chat.render(prompt_request(req))
    assert f"<think>\n{thought}\n</think>" in rendered.text
    assert len(rendered.tokens) == with_thought


# ------------------------------------------------------------------ live: usage and limits
def test_count_tokens_matches_the_prompt(server):
    sdk = client(server)
    system = "You are terse."
    counted = sdk.messages.count_tokens(model=model_of(server), system=system, messages=HELLO)
    msg = sdk.messages.create(
        model=model_of(server), system=system, max_tokens=4, messages=HELLO, **GREEDY
    )
    prompt = msg.usage.input_tokens + msg.usage.cache_read_input_tokens
    assert counted.input_tokens == prompt > 0
    r = httpx.post(
        server.url + "/v1/messages/count_tokens",
        json={"model": model_of(server), "messages": HELLO},
        timeout=60,
    )
    assert r.status_code == 200 and set(r.json()) == {"input_tokens"}


def test_usage_reports_cache_reads(server):
    sdk = client(server)
    messages = [{"role": "user", "content": "List three colours of the rainbow, please."}]
    first = sdk.messages.create(model=model_of(server), max_tokens=4, messages=messages)
    second = sdk.messages.create(model=model_of(server), max_tokens=4, messages=messages)
    for msg in (first, second):
        assert isinstance(msg.usage.cache_read_input_tokens, int)
        assert msg.usage.cache_creation_input_tokens == 0
    assert second.usage.cache_read_input_tokens > first.usage.cache_read_input_tokens
    total = first.usage.input_tokens + first.usage.cache_read_input_tokens
    assert second.usage.input_tokens + second.usage.cache_read_input_tokens == total


def test_stop_sequences(server):
    sdk = client(server)
    free = sdk.messages.create(model=model_of(server), max_tokens=16, messages=HELLO, **GREEDY)
    words = free.content[0].text.split()
    assert len(words) >= 2
    stop = words[1]
    msg = sdk.messages.create(
        model=model_of(server), max_tokens=16, messages=HELLO, **GREEDY, stop_sequences=[stop]
    )
    assert msg.stop_reason == "stop_sequence" and msg.stop_sequence == stop
    assert stop not in msg.content[0].text
    assert free.content[0].text.startswith(msg.content[0].text)


def test_max_tokens(server):
    msg = client(server).messages.create(
        model=model_of(server),
        max_tokens=3,
        messages=[{"role": "user", "content": "Write a long story about a dragon."}],
        **GREEDY,
    )
    assert msg.stop_reason == "max_tokens" and msg.stop_sequence is None
    assert msg.usage.output_tokens == 3


def test_concurrent_streams_equal_solo(server):
    prompts = ["Name a fruit.", "Name a city.", "Count to five.", "What is the sun?"]
    sdk = client(server)

    def run(prompt: str) -> str:
        with sdk.messages.stream(
            model=model_of(server),
            max_tokens=10,
            messages=[{"role": "user", "content": prompt}],
            **GREEDY,
        ) as stream:
            return stream.get_final_text()

    solo = [run(p) for p in prompts]
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(run, prompts))
    assert together == solo
    assert all(solo)


# --------------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"max_tokens": None}, "max_tokens"),
        ({"messages": [{"role": "bot", "content": "hi"}]}, "messages.0.role"),
        ({"max_tokens": "lots"}, "max_tokens"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"messages": "hi"}, "messages"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages.0.content"),
        ({"temperature": 1.5}, "temperature"),
        ({"sse_ping_interval": -5}, "sse_ping_interval"),
        ({"tool_choice": {"type": "any"}}, "tool_choice"),
        ({"stream": "maybe"}, "stream"),
        ({"thinking": {"type": "enabled", "budget_tokens": 0}}, "thinking.budget_tokens"),
        ({"tools": [{"name": "t"}]}, "tools.0.input_schema"),
        ({"messages": [{"role": "user", "content": [{"type": "text"}]}]}, "messages.0.content.0"),
    ],
)
def test_invalid_requests_are_anthropic_400s(server, change, field):
    body = body_for(server) | change
    body = {k: v for k, v in body.items() if v is not None}
    r = httpx.post(server.url + "/v1/messages", json=body, timeout=60)
    assert r.status_code == 400, r.text
    err = r.json()
    assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
    assert f"'{field}" in err["error"]["message"]


def test_unsupported_blocks_name_the_field(server):
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": ""}}
    content = [{"type": "text", "text": "What is this?"}, image]
    r = httpx.post(
        server.url + "/v1/messages",
        json=body_for(server, messages=[{"role": "user", "content": content}]),
        timeout=60,
    )
    assert r.status_code == 400
    assert r.json()["error"]["message"].startswith("Field 'messages.0.content.1': ")
    assert "'image'" in r.json()["error"]["message"]


def test_disconnect_frees_the_slot(server):
    engine = server.state.engine
    body = body_for(
        server,
        max_tokens=2000,
        stream=True,
        messages=LONG,
    )
    with httpx.stream("POST", server.url + "/v1/messages", json=body, timeout=120) as r:
        lines = r.iter_lines()
        seen = 0
        for line in lines:
            seen += line.startswith("event: content_block_delta")
            if seen >= 3:
                break
        assert engine.busy_slots == 1
    deadline = time.monotonic() + 30
    while engine.busy_slots and time.monotonic() < deadline:
        time.sleep(0.05)
    assert engine.busy_slots == 0


def test_non_stream_client_timeout_frees_the_slot(server):
    engine = server.state.engine
    body = body_for(server, max_tokens=2000, messages=LONG)
    # The story is sampled: on the rare run where it ends within the timeout, ask again.
    for _attempt in range(3):
        try:
            httpx.post(server.url + "/v1/messages", json=body, timeout=1.0)
        except httpx.ReadTimeout:
            break
    else:
        pytest.fail("the model finished three long stories within a second each")
    assert engine.busy_slots >= 1  # ours (the shared server may still end an earlier one)
    deadline = time.monotonic() + 30
    while engine.busy_slots and time.monotonic() < deadline:
        time.sleep(0.05)
    assert engine.busy_slots == 0


@pytest.mark.slow
def test_auth_and_overload_errors():
    with run_server(parallel=1, max_queue=1, api_key=["secret"]) as live:
        body = body_for(live, max_tokens=400, stream=True, messages=LONG)
        r = httpx.post(live.url + "/v1/messages", json=body, timeout=60)
        assert r.status_code == 401
        assert r.json() == {
            "type": "error",
            "error": {"type": "authentication_error", "message": "Invalid API Key"},
        }
        with pytest.raises(anthropic.AuthenticationError):
            client(live).messages.create(model=model_of(live), max_tokens=2, messages=HELLO)
        good = anthropic.Anthropic(base_url=live.url, api_key="secret", max_retries=0)
        answer = good.messages.create(model=model_of(live), max_tokens=2, messages=HELLO)
        assert answer.type == "message" and answer.usage.output_tokens > 0

        headers = {"x-api-key": "secret"}
        url = live.url + "/v1/messages"
        with contextlib.ExitStack() as held:
            running = held.enter_context(
                httpx.stream("POST", url, json=body, headers=headers, timeout=60)
            )
            lines = running.iter_lines()  # held: a dropped iterator closes the response
            for line in lines:  # generating: it has left the queue
                if line.startswith("event: content_block_delta"):
                    break
            waiting = held.enter_context(
                httpx.stream("POST", url, json=body, headers=headers, timeout=60)
            )
            assert running.status_code == waiting.status_code == 200
            r = httpx.post(url, json=body, headers=headers, timeout=60)
            assert r.status_code == 503
            assert r.json()["type"] == "error"
            assert r.json()["error"]["type"] == "overloaded_error"


def test_chat_request_uses_anthropic_fields(server):
    req = MessagesRequest.model_validate(
        body_for(server, stop_sequences=["x", "y"], top_k=5, top_p=0.5, max_tokens=9)
    )
    chat = chat_request(server.state, req)
    assert chat.stop == ("x", "y") and chat.max_tokens == 9
    assert chat.sampling.top_k == 5 and chat.sampling.top_p == 0.5
    assert chat.sampling.greedy


def test_system_messages_among_the_turns_map_to_the_system_prompt_or_the_user_side():
    """Claude Code 2.1 sends `role: "system"` inside `messages` (after the first user turn)."""
    req = CountTokensRequest.model_validate(
        {
            "model": "m",
            "system": "Be brief.",
            "messages": [
                {"role": "system", "content": "Leading instructions."},
                {"role": "user", "content": "Hello"},
                {"role": "system", "content": [{"type": "text", "text": "A reminder."}]},
                {"role": "assistant", "content": "Hi."},
                {"role": "system", "content": "Another reminder."},
                {"role": "user", "content": "Bye"},
            ],
        }
    )
    assert chat_messages(req) == [
        {"role": "system", "content": "Be brief.\n\nLeading instructions."},
        {
            "role": "user",
            "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": "A reminder."}],
        },
        {"role": "assistant", "content": "Hi."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Another reminder."},
                {"type": "text", "text": "Bye"},
            ],
        },
    ]
    bad = CountTokensRequest.model_validate(
        {
            "model": "m",
            "messages": [
                {"role": "user", "content": "Hi"},
                {"role": "system", "content": [{"type": "tool_use", "id": "t", "name": "x"}]},
            ],
        }
    )
    with pytest.raises(APIError) as err:
        chat_messages(bad)
    assert err.value.status == 400 and "messages.1.content.0" in err.value.message


BILLING = "x-anthropic-billing-header: cc_version=2.1.197.{stamp}; cc_entrypoint=cli; cch={cch};"


def claude_code_request(stamp: str, question: str) -> dict:
    """The shape of Claude Code 2.1's requests: the billing line as the first system block
    (its stamp changes with each session), the instructions after it, a system message among
    the turns; 2.1.332's thinking display, context edits and effort."""
    return {
        "model": "claude-opus-5-5",
        "max_tokens": 8,
        "temperature": 0,
        "thinking": {"type": "adaptive", "display": "updates"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "output_config": {"effort": "medium"},
        "metadata": {"user_id": '{"device_id":"8d3a","account_uuid":"","session_id":"b18b"}'},
        "system": [
            {"type": "text", "text": BILLING.format(stamp=stamp, cch=stamp[::-1])},
            {
                "type": "text",
                "text": "You are Claude Code, a coding agent. "
                + "Follow the repository's conventions and keep answers short. " * 6,
                "cache_control": {"type": "ephemeral"},
            },
        ],
        "messages": [
            {"role": "user", "content": question},
            {"role": "system", "content": "<system-reminder>It is 2026-12-05.</system-reminder>"},
        ],
    }


def test_billing_line_is_dropped_so_sessions_share_the_cache(server):
    req = CountTokensRequest.model_validate(claude_code_request("a1b", "Hi"))
    system = chat_messages(req)[0]["content"]
    assert system.startswith("You are Claude Code") and "billing" not in system
    first = httpx.post(
        server.url + "/v1/messages", json=claude_code_request("7f3", "Name a prime."), timeout=60
    )
    assert first.status_code == 200, first.text
    again = httpx.post(
        server.url + "/v1/messages", json=claude_code_request("c09", "Name a prime."), timeout=60
    )
    assert again.status_code == 200, again.text
    usage = again.json()["usage"]
    # a new session (another stamp) reuses the whole prompt but its last token
    assert usage["input_tokens"] <= 1 and usage["cache_read_input_tokens"] > 50
    assert again.json()["content"] == first.json()["content"]


def test_a_long_prefill_is_kept_alive_with_ping_events(server):
    """Claude Code's stream watchdog counts events, not SSE comments: the keep-alive during a
    long prompt is Anthropic's `ping` event."""
    story = " ".join(f"Line {i}: the keeper lit the lamp and watched the sea." for i in range(250))
    body = body_for(
        server,
        stream=True,
        max_tokens=2,
        sse_ping_interval=1,
        messages=[{"role": "user", "content": story}],
    )
    with httpx.stream("POST", server.url + "/v1/messages", json=body, timeout=300) as r:
        raw = r.read().decode()
    assert ":\n\n" not in raw.replace("data: ", "")  # no comment frame
    names = [n for n, _ in sse_events(raw)]
    first_block = names.index("content_block_start")
    assert names[:2] == ["message_start", "ping"]
    assert names[2:first_block].count("ping") >= 1  # the prefill took over a second
    assert set(names[2:first_block]) == {"ping"}
