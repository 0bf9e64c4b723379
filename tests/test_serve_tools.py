"""Tool calls end to end: a real tool-calling template (Qwen2.5, Hermes `<tool_call>` format),
the real engine, and each API family's client. `tool_choice` "required" is enforced with a
grammar, so even the tiny embedded model produces a well-formed call."""

from __future__ import annotations

import json
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
from serverkit import run_server

MODEL_FIXTURES = {"tool_server"}  # fixtures that load a model: users are slow

TEMPLATE = (
    Path(__file__).resolve().parents[2]
    / "shared/data/chat-templates/Qwen-Qwen2.5-7B-Instruct.jinja"
)
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
MODEL = "SmolLM2-135M-Instruct.Q4_1"  # the embedded model's id
QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def tool_server():
    if not TEMPLATE.is_file():
        pytest.skip(f"chat template test data missing: {TEMPLATE}")
    with run_server(parallel=2, chat_template_file=str(TEMPLATE)) as live:
        yield live


@pytest.fixture(scope="module")
def client(tool_server):
    return openai.OpenAI(base_url=tool_server.v1, api_key="x")


def test_required_tool_call_non_stream(client):
    resp = client.chat.completions.create(
        model=MODEL,
        messages=QUESTION,
        tools=[WEATHER],
        tool_choice="required",
        parallel_tool_calls=False,
        temperature=0,
        max_tokens=80,
    )
    choice = resp.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather"
    assert isinstance(json.loads(call.function.arguments)["city"], str)
    assert call.id.startswith("call_")


def test_parallel_calls_are_each_well_formed(client):
    resp = client.chat.completions.create(
        model=MODEL,
        messages=QUESTION,
        tools=[WEATHER],
        tool_choice="required",
        temperature=0,
        max_tokens=120,
    )
    calls = resp.choices[0].message.tool_calls
    assert calls and len({c.id for c in calls}) == len(calls)
    for call in calls:
        assert call.function.name == "get_weather"
        assert isinstance(json.loads(call.function.arguments)["city"], str)


def test_required_tool_call_streamed(client):
    stream = client.chat.completions.create(
        model=MODEL,
        messages=QUESTION,
        tools=[WEATHER],
        tool_choice="required",
        temperature=0,
        max_tokens=80,
        stream=True,
    )
    calls: dict[int, dict] = {}
    finish = None
    for chunk in stream:
        for choice in chunk.choices:
            for tc in choice.delta.tool_calls or []:
                entry = calls.setdefault(tc.index, {"name": "", "arguments": ""})
                entry["name"] += tc.function.name or ""
                entry["arguments"] += tc.function.arguments or ""
            finish = choice.finish_reason or finish
    assert finish == "tool_calls"
    assert calls[0]["name"] == "get_weather"
    assert "city" in json.loads(calls[0]["arguments"])


def test_named_tool_choice_and_tool_result_round_trip(client):
    other = {**WEATHER, "function": {**WEATHER["function"], "name": "get_time"}}
    first = client.chat.completions.create(
        model=MODEL,
        messages=QUESTION,
        tools=[WEATHER, other],
        tool_choice={"type": "function", "function": {"name": "get_time"}},
        temperature=0,
        max_tokens=80,
    )
    call = first.choices[0].message.tool_calls[0]
    assert call.function.name == "get_time"
    follow_up = [
        *QUESTION,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": '{"time": "12:00"}'},
    ]
    second = client.chat.completions.create(
        model=MODEL,
        messages=follow_up,
        tools=[WEATHER, other],
        temperature=0,
        max_tokens=16,
    )
    assert second.usage.prompt_tokens > first.usage.prompt_tokens


def test_auto_tool_choice_lets_the_model_answer_in_text(client):
    resp = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Say hello."}],
        tools=[WEATHER],
        temperature=0,
        max_tokens=16,
    )
    choice = resp.choices[0]
    # SmolLM2 does not call tools on its own: its words arrive as content, nothing is lost
    assert choice.message.content or choice.message.tool_calls


def test_anthropic_tool_use(tool_server):
    client = anthropic.Anthropic(base_url=tool_server.url, api_key="x")
    msg = client.messages.create(
        model=MODEL,
        max_tokens=80,
        extra_body={"temperature": 0},  # this SDK version has no temperature argument
        messages=QUESTION,
        tools=[
            {
                "name": "get_weather",
                "description": "weather",
                "input_schema": WEATHER["function"]["parameters"],
            }
        ],
        tool_choice={"type": "any"},
    )
    assert msg.stop_reason == "tool_use"
    block = next(b for b in msg.content if b.type == "tool_use")
    assert block.name == "get_weather" and isinstance(block.input.get("city"), str)
    assert block.id.startswith("toolu_")


def test_responses_function_call(tool_server):
    client = openai.OpenAI(base_url=tool_server.v1, api_key="x")
    resp = client.responses.create(
        model=MODEL,
        input="What is the weather in Paris?",
        max_output_tokens=80,
        tools=[
            {
                "type": "function",
                "name": "get_weather",
                "description": "weather",
                "parameters": WEATHER["function"]["parameters"],
            }
        ],
        tool_choice="required",
        temperature=0,
    )
    call = next(item for item in resp.output if item.type == "function_call")
    assert call.name == "get_weather" and "city" in json.loads(call.arguments)


def test_tool_choice_with_response_format_is_refused(tool_server):
    r = httpx.post(
        tool_server.v1 + "/chat/completions",
        json={
            "messages": QUESTION,
            "tools": [WEATHER],
            "tool_choice": "required",
            "response_format": {"type": "json_object"},
            "max_tokens": 8,
        },
    )
    assert r.status_code == 400
    assert r.json()["error"]["type"] == "invalid_request_error"


# A call cut by max_tokens: finish "length" and no raw `<tool_call>` markup as text (the
# cut call is dropped: docs/api-openai.md). The grammar of "required" makes the
# answer start with the markup, so 6 tokens always cut it.


def test_chat_call_cut_by_max_tokens_leaves_no_markup(client):
    for stream in (False, True):
        kwargs = dict(
            model=MODEL,
            messages=QUESTION,
            tools=[WEATHER],
            tool_choice="required",
            temperature=0,
            max_tokens=6,
        )
        if stream:
            chunks = list(client.chat.completions.create(stream=True, **kwargs))
            content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            reasons = [c.choices[0].finish_reason for c in chunks if c.choices]
            assert reasons[-1] == "length"
            assert not any(c.choices[0].delta.tool_calls for c in chunks if c.choices)
        else:
            choice = client.chat.completions.create(**kwargs).choices[0]
            content = choice.message.content or ""
            assert choice.finish_reason == "length" and not choice.message.tool_calls
        assert "<tool_call" not in content and "{" not in content


def test_responses_call_cut_by_max_tokens_leaves_no_markup(tool_server):
    client = openai.OpenAI(base_url=tool_server.v1, api_key="x")
    resp = client.responses.create(
        model=MODEL,
        input="What is the weather in Paris?",
        max_output_tokens=6,
        tools=[
            {
                "type": "function",
                "name": "get_weather",
                "parameters": WEATHER["function"]["parameters"],
            }
        ],
        tool_choice="required",
        temperature=0,
    )
    assert resp.status == "incomplete"
    assert "<tool_call" not in json.dumps(resp.model_dump()["output"])


def test_anthropic_call_cut_by_max_tokens_leaves_no_markup(tool_server):
    client = anthropic.Anthropic(base_url=tool_server.url, api_key="x")
    msg = client.messages.create(
        model=MODEL,
        max_tokens=6,
        extra_body={"temperature": 0},
        messages=QUESTION,
        tools=[{"name": "get_weather", "input_schema": WEATHER["function"]["parameters"]}],
        tool_choice={"type": "any"},
    )
    assert msg.stop_reason == "max_tokens"
    assert all(b.type == "text" and "<tool_call" not in b.text for b in msg.content)
