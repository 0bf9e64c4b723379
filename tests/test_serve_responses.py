"""`/v1/responses`: request conversion and event mapping (pure), then the real server through
the official `openai` SDK and raw httpx (exact event sequence)."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
import openai
import pytest
from llamactl.server.errors import APIError
from llamactl.server.openai.responses.convert import (
    convert_tools,
    items_to_messages,
    resolve_items,
    thinking,
)
from llamactl.server.openai.responses.output import OutputBuilder, output_text
from llamactl.server.openai.responses.protocol import (
    InputItem,
    ReasoningConfig,
    ResponsesRequest,
)
from llamactl.server.openai.responses.store import ResponseStore, StoredResponse
from pydantic import TypeAdapter, ValidationError

from llamactl.engine.types import (
    ContentDelta,
    Done,
    ReasoningDelta,
    Timings,
    ToolCallDelta,
    Usage,
)

# ============================================================================ pure parts


INPUT_ITEM: TypeAdapter[Any] = TypeAdapter(InputItem)


def items(*raw: dict[str, Any]) -> list[Any]:
    return [INPUT_ITEM.validate_python(r) for r in raw]


def test_items_become_chat_messages():
    got = items_to_messages(
        items(
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
            {"type": "reasoning", "summary": [], "content": [{"text": "Use the tool."}]},
            {"type": "message", "role": "assistant", "content": "Checking."},
            {"type": "function_call", "call_id": "call_1", "name": "wx", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "a"},
                    {"type": "input_text", "text": "b"},
                ],
            },
        )
    )
    assert got == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": "Checking.",
            "reasoning_content": "Use the tool.",
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "wx", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny", "name": "wx"},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
    ]


def test_output_items_round_trip_as_input():
    """A response's own output items, sent back, are the assistant turn they came from."""
    out = [
        {"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "",
         "content": [{"type": "reasoning_text", "text": "hmm"}], "status": "completed"},
        {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "Hi", "annotations": [], "logprobs": []}]},
    ]  # fmt: skip
    assert items_to_messages(items(*out)) == [
        {"role": "assistant", "content": "Hi", "reasoning_content": "hmm"}
    ]


def test_item_reference_and_unsupported_parts():
    stored = items({"id": "msg_9", "role": "user", "content": "stored text"})[0]
    got = resolve_items(items({"type": "item_reference", "id": "msg_9"}), {"msg_9": stored}.get)
    assert got == [stored]
    with pytest.raises(APIError, match=r"Field 'input.0.id'"):
        resolve_items(items({"type": "item_reference", "id": "nope"}), {}.get)
    with pytest.raises(APIError, match=r"input.0.content.0': 'input_file' is not supported"):
        items_to_messages(
            items({"role": "user", "content": [{"type": "input_file", "file_id": "f"}]})
        )


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "input"),
        ({"input": 3}, "input"),
        ({"input": [{"role": "robot", "content": "x"}]}, "input.0.role"),
        ({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}, "input.0.call_id"),
        ({"input": [{"type": "image_generation_call"}]}, "input.0"),
        ({"input": "x", "text": {"format": {"type": "json_schema"}}}, "text.format.schema"),
        ({"input": "x", "reasoning": {"effort": "huge"}}, "reasoning.effort"),
        ({"input": "x", "tools": [{"type": "function"}]}, "tools.0.name"),
    ],
)
def test_validation_locates_the_field(body, field):
    with pytest.raises(ValidationError) as info:
        ResponsesRequest.model_validate(body)
    locs = [".".join(str(x) for x in e["loc"]) for e in info.value.errors()]
    assert locs[0] == field


def test_tools_and_tool_choice():
    req = ResponsesRequest.model_validate(
        {
            "input": "x",
            "tools": [
                {"type": "function", "name": "a", "parameters": {"type": "object"}},
                {"type": "function", "name": "b", "strict": False},
                {"type": "web_search"},
            ],
        }
    )
    all_tools = convert_tools(req.tools, None)
    assert [t["function"]["name"] for t in all_tools.chat] == ["a", "b"]
    assert all_tools.chat[0]["function"]["strict"] is True
    assert [t["name"] for t in all_tools.echo] == ["a", "b"] and all_tools.choice == "auto"
    assert convert_tools(req.tools, "none").chat is None
    only_b = convert_tools(req.tools, {"type": "function", "name": "b"})
    assert [t["function"]["name"] for t in only_b.chat] == ["b"]
    assert only_b.chat_choice == {"type": "function", "function": {"name": "b"}}
    allowed = {
        "type": "allowed_tools",
        "mode": "required",
        "tools": [{"type": "function", "name": "a"}],
    }
    narrowed = convert_tools(req.tools, allowed)
    assert [t["function"]["name"] for t in narrowed.chat] == ["a"]
    assert narrowed.chat_choice == "required" and narrowed.choice == allowed
    with pytest.raises(APIError, match="tool_choice.name"):
        convert_tools(req.tools, {"type": "function", "name": "zz"})
    with pytest.raises(APIError, match="'tool_choice'"):
        convert_tools(req.tools, "sometimes")


def test_reasoning_effort_switches_thinking():
    assert thinking(ReasoningConfig(effort="none")).enable is False
    assert thinking(ReasoningConfig(effort="minimal")).budget == 0
    high = thinking(ReasoningConfig(effort="high", max_tokens=5))
    assert (high.enable, high.budget, high.template_kwargs) == (
        True,
        5,
        {"reasoning_effort": "high"},
    )
    assert thinking(None).enable is None


def done(reason: str = "stop") -> Done:
    return Done(reason, Usage(10, 0, 5), Timings())  # type: ignore[arg-type]


def test_builder_maps_tool_calls_to_function_call_items():
    b = OutputBuilder()
    events = []
    for ev in [
        ReasoningDelta("think"),
        ContentDelta("\n"),  # whitespace before a call makes no message
        ToolCallDelta(0, "call_abc", "get_weather", '{"city":"Paris"}'),
        ToolCallDelta(1, "", "get_time", "{}"),
        done(),
    ]:
        events += b.feed(ev)
    types = [e["type"] for e in events]
    assert types == [
        "response.output_item.added",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
    ]
    reasoning, call, call2 = b.output
    assert reasoning["content"] == [{"type": "reasoning_text", "text": "think"}]
    assert call == {
        "id": "fc_abc",
        "type": "function_call",
        "status": "completed",
        "arguments": '{"city":"Paris"}',
        "call_id": "call_abc",
        "name": "get_weather",
    }
    assert call2["call_id"].startswith("call_") and call2["id"] == "fc_" + call2["call_id"][5:]
    mistral = OutputBuilder().feed(ToolCallDelta(0, "a1B2c3D4e", "f", "{}"))[0]["item"]
    assert (mistral["call_id"], mistral["id"]) == ("a1B2c3D4e", "fc_a1B2c3D4e")
    added = events[4]
    assert added["item"]["arguments"] == "" and added["item"]["status"] == "in_progress"
    assert [e["output_index"] for e in events[4:8]] == [1, 1, 1, 1]
    # and the stored conversation reads the calls back as one assistant turn
    msgs = items_to_messages(items(*b.output))
    assert [c["function"]["name"] for c in msgs[0]["tool_calls"]] == ["get_weather", "get_time"]


def test_builder_parallel_tool_calls_false_keeps_the_first():
    b = OutputBuilder(parallel_tool_calls=False)
    for ev in [ToolCallDelta(0, "x", "a", "{}"), ToolCallDelta(1, "y", "b", "{}"), done()]:
        b.feed(ev)
    assert [i["name"] for i in b.output] == ["a"]


def test_builder_text_then_cut():
    b = OutputBuilder()
    events = b.feed(ContentDelta("Hel")) + b.feed(ContentDelta("lo")) + b.feed(done("length"))
    assert [e["type"] for e in events] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]
    assert b.truncated and b.output[0]["status"] == "incomplete"
    assert events[0]["item"]["content"] == [] and events[0]["item"]["status"] == "in_progress"
    assert output_text(b.output) == "Hello"


def test_builder_empty_answer_still_has_a_message():
    b = OutputBuilder()
    b.feed(done())
    assert [i["type"] for i in b.output] == ["message"]
    assert output_text(b.output) == ""


def test_store_is_bounded():
    store = ResponseStore(capacity=2)
    for i in range(3):
        store.put(StoredResponse({"id": f"r{i}"}, ()))
    assert store.get("r0") is None and store.get("r2") is not None and len(store) == 2


# =========================================================================== live server


def client(live) -> openai.OpenAI:
    return openai.OpenAI(base_url=live.v1, api_key="none", max_retries=0, timeout=240)


def post(live, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(live.v1 + path, json=body, timeout=240)


def sse_events(live, body: dict[str, Any]) -> tuple[list[tuple[str, dict]], str]:
    """(event name, data) of a raw stream, and the raw text."""
    with httpx.stream("POST", live.v1 + "/responses", json=body, timeout=240) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        raw = resp.read().decode()
    events = []
    for block in raw.split("\n\n"):
        lines = [line for line in block.split("\n") if line and not line.startswith(":")]
        if not lines:
            continue
        assert lines[0].startswith("event: ") and lines[1].startswith("data: ")
        events.append((lines[0][7:], json.loads(lines[1][6:])))
    return events, raw


GREEDY = {"temperature": 0}


def test_create_non_stream(server):
    r = client(server).responses.create(
        input="Say hello.", max_output_tokens=6, instructions="You are terse.", **GREEDY
    )
    assert r.id.startswith("resp_") and r.object == "response"
    assert r.output[0].type == "message" and r.output[0].id.startswith("msg_")
    assert r.output[0].role == "assistant" and r.output[0].content[0].type == "output_text"
    assert r.output_text and r.output_text == r.output[0].content[0].text
    assert r.status in ("completed", "incomplete")
    assert r.model == server.state.model_id
    assert (r.instructions, r.max_output_tokens, r.temperature) == ("You are terse.", 6, 0.0)
    assert r.tools == [] and r.tool_choice == "auto" and r.parallel_tool_calls is True
    u = r.usage
    assert u.input_tokens > 0 and 0 < u.output_tokens <= 6
    assert u.total_tokens == u.input_tokens + u.output_tokens
    assert u.input_tokens_details.cached_tokens >= 0
    assert u.output_tokens_details.reasoning_tokens == 0


def test_every_response_names_its_id_in_a_header(server):
    """`X-Response-Id`, before the body: what a balancer keys `previous_response_id` on
    (docs/scale.md)."""
    body = {"input": "Say hello.", "max_output_tokens": 4, **GREEDY}
    r = httpx.post(server.url + "/v1/responses", json=body, timeout=60)
    assert r.headers["X-Response-Id"] == r.json()["id"]
    with httpx.stream(
        "POST", server.url + "/v1/responses", json={**body, "stream": True}, timeout=60
    ) as s:
        rid = s.headers["X-Response-Id"]
        last = [line for line in s.iter_lines() if line.startswith("data: ")][-1]
    assert json.loads(last[6:])["response"]["id"] == rid


def test_stream_event_sequence(server):
    events, raw = sse_events(
        server, {"input": "Name a colour.", "max_output_tokens": 5, "stream": True, **GREEDY}
    )
    assert "[DONE]" not in raw
    names = [name for name, _ in events]
    assert all(name == data["type"] for name, data in events)
    assert next(iter(events[0][1])) == "type"  # type is the first key
    assert [d["sequence_number"] for _, d in events] == list(range(len(events)))
    assert names[:2] == ["response.created", "response.in_progress"]
    assert names[2:5] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
    ]
    assert names[-4:-1] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]
    assert names[-1] in ("response.completed", "response.incomplete")
    assert set(names[4:-4]) == {"response.output_text.delta"}
    rid = events[0][1]["response"]["id"]
    assert rid.startswith("resp_") and events[0][1]["response"]["status"] == "in_progress"
    assert {d["response"]["id"] for n, d in events if "response" in d} == {rid}
    item_id = events[2][1]["item"]["id"]
    assert item_id.startswith("msg_")
    per_item = [d for _, d in events[3:-1]]
    assert all(d.get("item_id", d.get("item", {}).get("id")) == item_id for d in per_item)
    text = "".join(d["delta"] for n, d in events if n == "response.output_text.delta")
    final = events[-1][1]["response"]
    assert final["output"][0]["content"][0]["text"] == text == events[-4][1]["text"]
    assert final["usage"]["output_tokens"] > 0 and "timings" in events[-1][1]


def test_stream_with_sdk_matches_non_stream(server):
    model = server.state.model_id
    body = {"model": model, "input": "Reply with one word: is fire hot?", **GREEDY}
    body["max_output_tokens"] = 24  # greedy SmolLM2 answers in 5 tokens, so it completes
    c = client(server)
    deltas = []
    with c.responses.stream(**body) as stream:
        for event in stream:
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
        final = stream.get_final_response()
    assert final.status == "completed" and final.output_text == "".join(deltas)
    assert final.output_text == c.responses.create(**body).output_text


def test_max_output_tokens_incomplete(server):
    r = client(server).responses.create(
        input="Tell me a long story about a dragon.", max_output_tokens=3, **GREEDY
    )
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.output[-1].status == "incomplete" and r.usage.output_tokens == 3
    events, _ = sse_events(
        server, {"input": "Tell me a long story.", "max_output_tokens": 2, "stream": True}
    )
    name, data = events[-1]
    assert name == "response.incomplete"
    assert data["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


def test_cached_tokens_grow_on_repeat(server):
    c = client(server)
    body = {"input": f"Repeat after me: {time.time_ns()} apples.", "max_output_tokens": 2}
    first = c.responses.create(**body, **GREEDY).usage
    second = c.responses.create(**body, **GREEDY).usage
    assert second.input_tokens == first.input_tokens
    assert second.input_tokens_details.cached_tokens > first.input_tokens_details.cached_tokens
    assert second.input_tokens_details.cached_tokens >= second.input_tokens // 2


def test_input_tokens_endpoint_and_instructions(server):
    c = client(server)
    long_rules = "Answer in French, in one short sentence, and never use the letter e. " * 3
    plain = c.responses.input_tokens.count(input="Hello")
    ruled = c.responses.input_tokens.count(input="Hello", instructions=long_rules)
    assert plain.object == "response.input_tokens"
    assert ruled.input_tokens > plain.input_tokens > 0
    made = c.responses.create(input="Hello", instructions=long_rules, max_output_tokens=1)
    assert made.usage.input_tokens == ruled.input_tokens
    assert made.instructions == long_rules
    raw = post(server, "/responses/input_tokens", {"input": "Hello"}).json()
    assert raw == {"object": "response.input_tokens", "input_tokens": plain.input_tokens}


def test_function_call_output_round_trip(server):
    def count(output: str) -> int:
        body = {
            "input": [
                {"role": "user", "content": "What is the weather in Paris?"},
                {
                    "type": "function_call",
                    "call_id": "call_1",
                    "name": "get_weather",
                    "arguments": '{"city": "Paris"}',
                },
                {"type": "function_call_output", "call_id": "call_1", "output": output},
            ]
        }
        return post(server, "/responses/input_tokens", body).json()["input_tokens"]

    short, long = count("sunny"), count("sunny, 24 degrees, light wind from the south-west")
    question_only = post(
        server, "/responses/input_tokens", {"input": "What is the weather in Paris?"}
    ).json()["input_tokens"]
    assert long > short > question_only
    r = client(server).responses.create(
        input=[
            {"role": "user", "content": "What is the weather in Paris?"},
            {"type": "function_call", "call_id": "c", "name": "get_weather", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c", "output": "sunny"},
        ],
        tools=[{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}],
        max_output_tokens=3,
        **GREEDY,
    )
    assert r.output and r.tools[0].name == "get_weather"


def test_previous_response_id_and_store(server):
    c = client(server)
    first = c.responses.create(
        input="My name is Ada.", instructions="Be kind.", max_output_tokens=4, **GREEDY
    )
    second = c.responses.create(
        input="What is my name?", previous_response_id=first.id, max_output_tokens=4, **GREEDY
    )
    assert second.previous_response_id == first.id
    # the whole first turn (question and answer) is in the second prompt
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
    counted = c.responses.input_tokens.count(
        input="What is my name?", previous_response_id=first.id
    )
    assert counted.input_tokens == second.usage.input_tokens
    assert c.responses.retrieve(first.id).output_text == first.output_text
    # an output item can be referenced by id
    ref = post(
        server,
        "/responses/input_tokens",
        {
            "input": [
                {"type": "item_reference", "id": first.output[0].id},
                {"role": "user", "content": "Go on."},
            ]
        },
    )
    assert ref.status_code == 200
    # not kept when store=false; deleted ones are gone
    unstored = c.responses.create(input="Hi", store=False, max_output_tokens=1)
    assert unstored.store is False
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(unstored.id)
    assert c.responses.delete(first.id) is None
    with pytest.raises(openai.NotFoundError):
        c.responses.create(input="x", previous_response_id=first.id, max_output_tokens=1)


def test_json_schema_output_parses(server):
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "boolean"}},
        "required": ["answer"],
        "additionalProperties": False,
    }
    r = client(server).responses.create(
        input="Is the sky blue? Answer in JSON.",
        text={"format": {"type": "json_schema", "name": "yes_no", "schema": schema}},
        max_output_tokens=40,
        **GREEDY,
    )
    assert r.status == "completed"
    assert isinstance(json.loads(r.output_text)["answer"], bool)
    assert r.text.format.type == "json_schema"


def test_concurrent_greedy_equal_solo(server):
    prompts = [f"Count to {n}." for n in (3, 4, 5, 6)]
    c = client(server)

    def run(p: str) -> str:
        return c.responses.create(input=p, max_output_tokens=8, **GREEDY).output_text

    solo = [run(p) for p in prompts]
    together: dict[int, str] = {}
    threads = [
        threading.Thread(target=lambda i=i: together.__setitem__(i, run(prompts[i])))
        for i in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [together[i] for i in range(4)] == solo


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"max_output_tokens": 1}, "'input'"),
        ({"input": "x", "temperature": 3}, "'temperature'"),
        ({"input": "x", "max_output_tokens": 0}, "'max_output_tokens'"),
        ({"input": [{"role": "robot", "content": "x"}]}, "'input.0.role'"),
        ({"input": [{"type": "bogus"}]}, "Cannot determine type of 'item'"),
        ({"input": "x", "text": {"format": {"type": "json_schema"}}}, "'text.format.schema'"),
        ({"input": "x", "tool_choice": {"type": "function", "name": "f"}}, "'tool_choice.name'"),
        ({"input": "x", "background": True}, "'background'"),
        ({"input": "x", "sse_ping_interval": -5, "stream": True}, "'sse_ping_interval'"),
        ({"input": [], "max_output_tokens": 1}, "'input'"),
    ],
)
def test_errors_name_the_field(server, body, needle):
    resp = post(server, "/responses", body)
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == 400
    assert needle in error["message"]


def test_unknown_previous_response_is_404(server):
    resp = post(server, "/responses", {"input": "x", "previous_response_id": "resp_nope"})
    assert resp.status_code == 404 and "previous_response_id" in resp.json()["error"]["message"]
    assert httpx.get(server.v1 + "/responses/resp_nope").status_code == 404


def test_disconnect_cancels_generation(server):
    engine = server.state.engine
    body = {"input": "Count from 1 to 500, one number per line.", "stream": True}
    body["max_output_tokens"] = 400
    with httpx.stream("POST", server.v1 + "/responses", json=body, timeout=240) as resp:
        for line in resp.iter_lines():
            if "output_text.delta" in line:
                break
    deadline = time.monotonic() + 30
    while engine.busy_slots and time.monotonic() < deadline:
        time.sleep(0.1)
    assert engine.busy_slots == 0


def test_disconnect_cancels_non_stream(server):
    engine = server.state.engine
    # a schema that forces a long answer: the model cannot finish before the client leaves
    long_list = {"type": "array", "items": {"type": "integer"}, "minItems": 400}
    body = {
        "input": "Count from 1 to 500.",
        "max_output_tokens": 2000,
        "text": {"format": {"type": "json_schema", "name": "numbers", "schema": long_list}},
    }
    with pytest.raises(httpx.TimeoutException):
        httpx.post(server.v1 + "/responses", json=body, timeout=1.5)
    deadline = time.monotonic() + 30
    while engine.busy_slots and time.monotonic() < deadline:
        time.sleep(0.1)
    assert engine.busy_slots == 0


# ================================================================ reasoning (thinking model)


def test_reasoning_item_then_message(thinking_server):
    r = client(thinking_server).responses.create(
        input="What is 2+2?",
        reasoning={"effort": "low", "max_tokens": 3},
        max_output_tokens=12,
        **GREEDY,
    )
    kinds = [item.type for item in r.output]
    assert kinds[:2] == ["reasoning", "message"], kinds
    reasoning = r.output[0]
    assert reasoning.id.startswith("rs_") and reasoning.summary == []
    assert reasoning.content[0].type == "reasoning_text" and reasoning.content[0].text.strip()
    assert 0 < r.usage.output_tokens_details.reasoning_tokens < r.usage.output_tokens
    assert r.reasoning.effort == "low"


def test_reasoning_stream_order(thinking_server):
    events, _ = sse_events(
        thinking_server,
        {
            "input": "What is 2+2?",
            "reasoning": {"max_tokens": 3},
            "max_output_tokens": 10,
            "stream": True,
            **GREEDY,
        },
    )
    names = [n for n, _ in events]
    first_text = names.index("response.output_text.delta")
    head = [n for n in names[2:first_text] if n != "response.reasoning_text.delta"]
    assert head == [
        "response.output_item.added",
        "response.reasoning_text.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert names[3] == "response.reasoning_text.delta"
    added = [d for n, d in events if n == "response.output_item.added"]
    assert [a["item"]["type"] for a in added] == ["reasoning", "message"]
    assert [a["output_index"] for a in added] == [0, 1]
    assert added[0]["item"]["id"].startswith("rs_")
    reasoning = "".join(d["delta"] for n, d in events if n == "response.reasoning_text.delta")
    final = events[-1][1]["response"]
    assert final["output"][0]["content"][0]["text"] == reasoning


def test_reasoning_effort_none_turns_thinking_off(thinking_server):
    r = client(thinking_server).responses.create(
        input="What is 2+2?", reasoning={"effort": "none"}, max_output_tokens=4, **GREEDY
    )
    assert [item.type for item in r.output] == ["message"]
    assert r.usage.output_tokens_details.reasoning_tokens == 0


def test_reasoning_items_go_back_into_the_prompt(thinking_server):
    def count(reasoning: str) -> int:
        body = {
            "input": [
                {"role": "user", "content": "Hi"},
                {
                    "type": "reasoning",
                    "summary": [],
                    "content": [{"type": "reasoning_text", "text": reasoning}],
                },
                {"type": "message", "role": "assistant", "content": "Hello!"},
                {"role": "user", "content": "Bye"},
            ]
        }
        return post(thinking_server, "/responses/input_tokens", body).json()["input_tokens"]

    assert count("The user greets me; I should greet back politely.") > count("Greet.")
