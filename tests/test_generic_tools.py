"""Tools on a model whose chat template knows none (llama.cpp's generic format): the reply
parser at every split point, the history written back, the grammar as llama.cpp runs it, and
the embedded SmolLM2 (its template has no tools) calling tools through every API."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anthropic
import openai
import pytest
from grammarkit import compile_grammar, grammar_accepts
from serverkit import run_server

from llamactl.engine.chat.generic_tools import (
    GenericReplyParser,
    generic_grammar,
    generic_messages,
)
from llamactl.engine.types import ContentDelta, ToolCallDelta

MODEL_FIXTURES = {"server", "vocab_model"}

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}},
    },
}
TOOLS = [WEATHER, TIME]


def run(chunks: list[str], *, cut: bool = False) -> tuple[str, list[tuple[str, Any]]]:
    parser = GenericReplyParser(id_factory=lambda: "call_1")
    deltas = [d for chunk in chunks for d in parser.push(ContentDelta(chunk))]
    if cut:
        parser.cut_off()
    deltas += parser.finish()
    text = "".join(d.text for d in deltas if isinstance(d, ContentDelta))
    calls = [(d.name, json.loads(d.arguments)) for d in deltas if isinstance(d, ToolCallDelta)]
    return text, calls


def every_split(text: str) -> list[list[str]]:
    return [[text[:i], text[i:]] for i in range(len(text) + 1)] + [list(text)]


ANSWERS = [
    ('{"response": "Hello there."}', "Hello there."),
    ('{"response": "line\\none \\"quoted\\" \\\\ tab\\t"}', 'line\none "quoted" \\ tab\t'),
    ('{"response": "caf\\u00e9 \\ud83d\\ude00 \\u4e2d"}', "caf\u00e9 \U0001f600 \u4e2d"),
    ('  {"response": ""}', ""),
]


@pytest.mark.parametrize(("raw", "answer"), ANSWERS)
def test_an_answer_streams_as_its_decoded_text_at_every_split(raw: str, answer: str) -> None:
    for chunks in every_split(raw):
        assert run(chunks) == (answer, [])


def test_the_answer_streams_before_the_reply_ends() -> None:
    parser = GenericReplyParser()
    out = parser.push(ContentDelta('{"response": "It is sun'))
    assert [d.text for d in out if isinstance(d, ContentDelta)] == ["It is sun"]


CALLS = [
    (
        '{"tool_call": {"name": "get_weather", "arguments": {"city": "Oslo"}}}',
        [("get_weather", {"city": "Oslo"})],
    ),
    (
        '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}, '
        '{"name": "get_time", "arguments": {}}]}',
        [("get_weather", {"city": "Oslo"}), ("get_time", {})],
    ),
    (
        '{"tool_call": {"name": "get_time", "arguments": "{\\"zone\\": \\"UTC\\"}"}}',
        [("get_time", {"zone": "UTC"})],
    ),
]


@pytest.mark.parametrize(("raw", "calls"), CALLS)
def test_calls_are_read_at_every_split(raw: str, calls: list[Any]) -> None:
    for chunks in every_split(raw):
        assert run(chunks) == ("", calls)


@pytest.mark.parametrize(
    "raw",
    [
        "Just some words.",
        '{"answer": 1}',
        "{",
        '{"tool": "x"}',
    ],
)
def test_text_that_is_no_reply_object_stays_content(raw: str) -> None:
    for chunks in every_split(raw):
        assert run(chunks) == (raw, [])


@pytest.mark.parametrize(
    "raw",
    [
        '{"tool_call": {"name": "get_weather", "arguments": {"city": "Os',  # cut short
        '{"tool_call": {"name": "get_weather", "arguments": {"city": "Oslo"}}}}',  # extra brace
        '{"tool_call": {"arguments": {}}}',  # no name
        '{"tool_calls": []}',
        '{"tool_call": {"name": "a"}}{"tool_call": {"name": "a"}}',  # duplicated
    ],
)
def test_a_broken_call_is_content_and_dropped_when_cut(raw: str) -> None:
    for chunks in every_split(raw):
        assert run(chunks) == (raw, [])
        assert run(chunks, cut=True) == ("", [])


def test_a_reply_cut_before_its_kind_is_known_leaves_nothing() -> None:
    for raw in ('{"tool_', '{"', "{", '{"response"'):
        assert run([raw], cut=True) == ("", [])
        assert run([raw]) == (raw, [])  # not cut: whatever the model wrote is content


def test_an_answer_cut_short_keeps_what_was_written() -> None:
    for chunks in every_split('{"response": "Half an ans\\u00'):
        text, calls = run(chunks, cut=True)
        assert text.startswith("Half an ans") and not calls


def test_history_calls_and_results_are_written_in_the_reply_format() -> None:
    call = {
        "id": "call_7",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
    }
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_7", "content": "Snow, -3 C"},
    ]
    out = generic_messages(messages, TOOLS)
    assert out[0]["role"] == "system" and out[0]["content"].startswith("Be brief.\n\n")
    assert '"name": "get_weather"' in out[0]["content"]
    assert "The current weather in a city" in out[0]["content"]
    assert json.loads(out[2]["content"]) == {
        "tool_call": {"name": "get_weather", "arguments": {"city": "Oslo"}}
    }
    assert "tool_calls" not in out[2]
    assert out[3]["role"] == "user"
    assert json.loads(out[3]["content"]) == {
        "tool_response": {"tool": "get_weather", "tool_call_id": "call_7", "content": "Snow, -3 C"}
    }
    assert messages[0]["content"] == "Be brief."  # the caller's messages are left alone


def test_a_past_answer_is_written_as_the_reply_the_model_wrote() -> None:
    messages = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": 'Hello, "you".'},
        {"role": "user", "content": "Go on"},
        {"role": "assistant", "content": "Well"},
    ]
    out = generic_messages(messages, TOOLS)
    assert out[2]["content"] == '{"response": "Hello, \\"you\\"."}'
    assert out[4]["content"] == '{"response": "Well"}'
    # a prefill the model continues stays as written; without tools nothing is rewritten
    assert generic_messages(messages, TOOLS, continued=True)[4]["content"] == "Well"
    assert generic_messages(messages, None) == messages


def test_without_tools_described_only_the_history_is_rewritten() -> None:
    messages = [{"role": "user", "content": "Hi"}]
    assert generic_messages(messages, None) == messages
    described = generic_messages(messages, TOOLS, answer=False)
    assert described[0]["role"] == "system" and '"response"' not in described[0]["content"]


def test_the_grammar_accepts_each_reply_shape_and_nothing_else(vocab_model) -> None:
    call = '{"tool_call": {"name": "get_weather", "arguments": {"city": "Oslo"}}}'
    two = (
        '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}, '
        '{"name": "get_time", "arguments": {}}]}'
    )
    answer = '{"response": "Hi!"}'
    auto = generic_grammar(TOOLS, "auto")
    assert grammar_accepts(vocab_model, auto, call)
    assert grammar_accepts(vocab_model, auto, answer)
    assert not grammar_accepts(vocab_model, auto, two)
    assert not grammar_accepts(vocab_model, auto, "Hi!")
    assert not grammar_accepts(vocab_model, auto, '{"tool_call": {"name": "rm", "arguments": {}}}')
    assert grammar_accepts(vocab_model, generic_grammar(TOOLS, "auto", parallel=True), two)
    required = generic_grammar(TOOLS, "required")
    assert grammar_accepts(vocab_model, required, call)
    assert not grammar_accepts(vocab_model, required, answer)
    named = generic_grammar(TOOLS, {"type": "function", "function": {"name": "get_time"}})
    assert not grammar_accepts(vocab_model, named, call)
    assert grammar_accepts(
        vocab_model, named, '{"tool_call": {"name": "get_time", "arguments": {}}}'
    )
    compile_grammar(vocab_model, generic_grammar([{"name": "free"}], "auto"))


NESTED = {
    "type": "function",
    "function": {
        "name": "plan",
        "parameters": {
            "type": "object",
            "properties": {
                "steps": {"type": "array", "items": {"type": "string"}},
                "options": {"type": "object"},
                "a space b": {"type": "integer"},
            },
            "required": ["steps"],
        },
    },
}


@pytest.mark.parametrize(
    "arguments",
    [{"steps": []}, {"steps": ["a", "b"], "options": {"x": [1, {"y": None}]}}, {"steps": ["é"]}],
)
def test_the_grammar_spaces_replies_as_the_history_renders_them(vocab_model, arguments) -> None:
    """The model can write a reply only as `json.dumps` writes it, so the call read back into
    the next request is the same text, token for token (the prompt cache keeps it)."""
    grammar = generic_grammar([NESTED], "auto")
    reply = {"tool_call": {"name": "plan", "arguments": arguments}}
    assert grammar_accepts(vocab_model, grammar, json.dumps(reply, ensure_ascii=False))
    for other in (json.dumps(reply, separators=(",", ":")), json.dumps(reply, indent=1)):
        if other != json.dumps(reply):
            assert not grammar_accepts(vocab_model, grammar, other), other
    spaced = json.dumps(reply)[:-2] + " }}"
    assert not grammar_accepts(vocab_model, grammar, spaced)
    assert grammar_accepts(vocab_model, grammar, '{"response": "Fine, thanks."}')
    assert not grammar_accepts(vocab_model, grammar, '{"response": "Fine, thanks." }')


# --------------------------------------------------------------------- the embedded model


@pytest.fixture(scope="module")
def server():
    with run_server(parallel=3) as live:  # SmolLM2: a template without tools
        yield live


def ask(live, **body: Any) -> Any:
    client = openai.OpenAI(base_url=live.v1, api_key="x", max_retries=0)
    body = {"model": "any", "temperature": 0, "max_tokens": 96, "tools": TOOLS, **body}
    return client.chat.completions.create(**body)


def test_the_embedded_model_calls_a_required_tool(server) -> None:
    reply = ask(
        server,
        messages=[{"role": "user", "content": "What is the weather in Rome?"}],
        tool_choice="required",
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.function.name in ("get_weather", "get_time")
    assert isinstance(json.loads(call.function.arguments), dict)
    assert reply.usage.prompt_tokens > 100  # the tools are in the prompt


def test_auto_answers_in_text_or_calls_and_says_which(server) -> None:
    for question in ("Hello! Who are you?", "What is the weather in Paris?"):
        choice = ask(server, messages=[{"role": "user", "content": question}]).choices[0]
        if choice.message.tool_calls:
            assert choice.finish_reason == "tool_calls"
        else:
            assert choice.finish_reason in ("stop", "length")
            assert choice.message.content and not choice.message.content.startswith("{")


def test_a_tool_result_round_trip_streams(server) -> None:
    first = ask(
        server,
        messages=[{"role": "user", "content": "Weather in Rome?"}],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
    ).choices[0]
    (call,) = first.message.tool_calls
    history = [
        {"role": "user", "content": "Weather in Rome?"},
        first.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 24 C"},
    ]
    stream = ask(server, messages=history, stream=True, tool_choice="none")
    text, finish = "", None
    for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
    assert text and finish in ("stop", "length")
    again = ask(server, messages=history, tool_choice="none").choices[0].message.content
    assert again == text  # streamed = whole, greedy


def test_the_next_turn_reuses_the_prompt_before_the_call(server) -> None:
    """The request carrying a call's result reuses all the first request's prompt. The call
    itself is decoded again: under the grammar the model writes it in other pieces than the
    tokenizer cuts the same text into (`{` `"` `t` `oo` `l` vs `{"` `tool`), as in llama-server."""
    question = [{"role": "user", "content": "What time is it in Tokyo, and the weather?"}]
    first = ask(server, messages=question, tool_choice="required")
    call = first.choices[0].message.tool_calls[0]
    history = [
        *question,
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "Clear, 18 C"},
    ]
    second = ask(server, messages=history, tool_choice="required")
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert cached >= first.usage.prompt_tokens - 1, (cached, first.usage)


def test_anthropic_and_responses_get_calls_too(server) -> None:
    message = anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0).messages.create(
        model="any",
        max_tokens=256,
        tools=[{"name": "get_weather", "input_schema": WEATHER["function"]["parameters"]}],
        tool_choice={"type": "any"},
        messages=[{"role": "user", "content": "Weather in Lima?"}],
        extra_body={"temperature": 0},  # greedy (this SDK no longer takes it as an argument)
    )
    assert message.stop_reason == "tool_use"
    assert any(block.type == "tool_use" for block in message.content)
    response = openai.OpenAI(base_url=server.v1, api_key="x", max_retries=0).responses.create(
        model="any",
        input="Weather in Lima?",
        tools=[{"type": "function", **WEATHER["function"]}],
        tool_choice="required",
        max_output_tokens=256,
        temperature=0,
    )
    kinds = {item.type for item in response.output}
    assert kinds == {"function_call"}  # one or more: Responses allows parallel calls


def test_concurrent_tool_requests_answer_as_alone(server) -> None:
    questions = ["Weather in Oslo?", "What time is it in UTC?", "Weather in Cairo?"]

    def one(question: str) -> Any:
        choice = ask(server, messages=[{"role": "user", "content": question}]).choices[0]
        calls = [(c.function.name, c.function.arguments) for c in choice.message.tool_calls or []]
        return choice.message.content, calls

    alone = [one(q) for q in questions]
    with ThreadPoolExecutor(len(questions)) as pool:
        assert list(pool.map(one, questions)) == alone
