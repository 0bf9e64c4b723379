"""Tool calls: format detection on real templates, the streaming parser of every family (at
every split point), and the forcing grammars, compiled and run by llama.cpp."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from typing import Any

import llama_cpp
import pytest
from grammarkit import compile_grammar, grammar_accepts
from sharedkit import CHAT_TEMPLATES

from llamactl.core.errors import InvalidRequestError
from llamactl.engine.chat import (
    ChatTemplate,
    OutputPipeline,
    ReasoningParser,
    ToolCallFormat,
    ToolCallParser,
    coalesce,
    make_tool_call_id,
    parse_tool_calls,
    tool_call_format,
    tool_call_grammar,
)
from llamactl.engine.chat.markers import THINK, thinking_markers
from llamactl.engine.chat.tool_formats import SYNTAXES
from llamactl.engine.types import ContentDelta, ReasoningDelta, ToolCallDelta

MODEL_FIXTURES = {"engine", "vocab_model"}  # fixtures that load a model: users are slow

F = ToolCallFormat
TEMPLATES = CHAT_TEMPLATES

DS_CALLS = ("<\uff5ctool\u2581calls\u2581begin\uff5c>", "<\uff5ctool\u2581calls\u2581end\uff5c>")
DS_CALL = ("<\uff5ctool\u2581call\u2581begin\uff5c>", "<\uff5ctool\u2581call\u2581end\uff5c>")
DS_SEP = "<\uff5ctool\u2581sep\uff5c>"
DSML = "\uff5cDSML\uff5c"

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather",
        "parameters": {
            "type": "object",
            "properties": {"location": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["location"],
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Current time",
        "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}},
    },
}
TOOLS = [WEATHER, TIME]
CALL_1 = ("get_weather", {"location": "Paris, FR", "days": 3})
CALL_2 = ("get_time", {"tz": "Europe/Paris"})

Call = tuple[str, dict[str, Any]]


# --------------------------------------------------------------------------- reference writers
# Each family's calls written the way its template renders them (and its grammar forces them).


def _bare(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _item(call: Call) -> str:
    return json.dumps({"name": call[0], "arguments": call[1]})


def _xml(head: str, param: str, tail: str) -> Callable[[Call], str]:
    def write(call: Call) -> str:
        name, args = call
        params = "".join(param.format(k=k, v=_bare(v)) for k, v in args.items())
        return head.format(name=name) + params + tail

    return write


def _dsml(section: str) -> Callable[[list[Call]], str]:
    def write(calls: list[Call]) -> str:
        out = f"<{DSML}{section}>\n"
        for name, args in calls:
            out += f'<{DSML}invoke name="{name}">\n'
            for k, v in args.items():
                flag = "true" if isinstance(v, str) else "false"
                out += f'<{DSML}parameter name="{k}" string="{flag}">{_bare(v)}</{DSML}parameter>\n'
            out += f"</{DSML}invoke>\n"
        return out + f"</{DSML}{section}>"

    return write


_QWEN = _xml(
    "<tool_call>\n<function={name}>\n",
    "<parameter={k}>\n{v}\n</parameter>\n",
    "</function>\n</tool_call>",
)
_SEED = _xml(
    "<seed:tool_call>\n<function={name}>\n",
    "<parameter={k}>{v}</parameter>\n",
    "</function>\n</seed:tool_call>",
)
_GLM = _xml(
    "<tool_call>{name}\n", "<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>\n", "</tool_call>"
)
_MINIMAX = _xml(
    '<invoke name="{name}">\n', '<parameter name="{k}">{v}</parameter>\n', "</invoke>\n"
)


def _pythonic(call: Call) -> str:
    return f"{call[0]}(" + ", ".join(f"{k}={json.dumps(v)}" for k, v in call[1].items()) + ")"


WRITERS: dict[ToolCallFormat, Callable[[list[Call]], str]] = {
    F.HERMES: lambda cs: "\n".join(f"<tool_call>\n{_item(c)}\n</tool_call>" for c in cs),
    F.QWEN3_CODER: lambda cs: "\n".join(map(_QWEN, cs)),
    F.SEED_OSS: lambda cs: "\n".join(map(_SEED, cs)),
    F.GLM: lambda cs: "\n".join(map(_GLM, cs)),
    F.FUNCTIONARY_V3_1: lambda cs: "".join(
        f"<function={n}>{json.dumps(a)}</function>" for n, a in cs
    ),
    F.LLAMA3_JSON: lambda cs: "; ".join(json.dumps({"name": n, "parameters": a}) for n, a in cs),
    F.MISTRAL: lambda cs: "[TOOL_CALLS][" + ", ".join(map(_item, cs)) + "]",
    F.MISTRAL_ARGS: lambda cs: "".join(f"[TOOL_CALLS]{n}[ARGS]{json.dumps(a)}" for n, a in cs),
    F.GRANITE: lambda cs: "<|tool_call|>[" + ", ".join(map(_item, cs)) + "]",
    F.DEEPSEEK_R1: lambda cs: (
        DS_CALLS[0]
        + "\n".join(
            f"{DS_CALL[0]}function{DS_SEP}{n}\n```json\n{json.dumps(a)}\n```{DS_CALL[1]}"
            for n, a in cs
        )
        + DS_CALLS[1]
    ),
    F.DEEPSEEK_V3: lambda cs: (
        DS_CALLS[0]
        + "".join(f"{DS_CALL[0]}{n}{DS_SEP}{json.dumps(a)}{DS_CALL[1]}" for n, a in cs)
        + DS_CALLS[1]
    ),
    F.DEEPSEEK_V3_2: _dsml("function_calls"),
    F.DEEPSEEK_V4: _dsml("tool_calls"),
    F.KIMI_K2: lambda cs: (
        "<|tool_calls_section_begin|>"
        + "".join(
            f"<|tool_call_begin|>functions.{n}:{i}<|tool_call_argument_begin|>{json.dumps(a)}"
            "<|tool_call_end|>"
            for i, (n, a) in enumerate(cs)
        )
        + "<|tool_calls_section_end|>"
    ),
    F.MINIMAX_M2: lambda cs: (
        "<minimax:tool_call>\n" + "".join(map(_MINIMAX, cs)) + "</minimax:tool_call>"
    ),
    F.MINIMAX_M1: lambda cs: "<tool_calls>\n" + "\n".join(map(_item, cs)) + "\n</tool_calls>",
    F.APRIEL: lambda cs: "<tool_calls>[" + ", ".join(map(_item, cs)) + "]</tool_calls>",
    F.NEMOTRON_V2: lambda cs: "<TOOLCALL>[" + ", ".join(map(_item, cs)) + "]</TOOLCALL>",
    F.COMMAND_R7B: lambda cs: (
        "<|START_ACTION|>[\n    "
        + ",\n    ".join(
            json.dumps({"tool_call_id": str(i), "tool_name": n, "parameters": a})
            for i, (n, a) in enumerate(cs)
        )
        + "\n]<|END_ACTION|>"
    ),
    F.FIREFUNCTION_V2: lambda cs: "functools[" + ", ".join(map(_item, cs)) + "]",
    F.SOLAR_OPEN: lambda cs: (
        "<|tool_calls|>"
        + "".join(
            f"<|tool_call:begin|>abcdefgh{i}<|tool_call:name|>{n}<|tool_call:args|>"
            f"{json.dumps(a)}<|tool_call:end|>"
            for i, (n, a) in enumerate(cs)
        )
    ),
    F.GPT_OSS: lambda cs: "".join(
        f"<|channel|>commentary to=functions.{n} <|constrain|>json<|message|>{json.dumps(a)}"
        for n, a in cs
    ),
    F.LFM2: lambda cs: (
        "<|tool_call_start|>[" + ", ".join(map(_pythonic, cs)) + "]<|tool_call_end|>"
    ),
}

ALL = list(ToolCallFormat)
PARALLEL = [f for f in ALL if SYNTAXES[f].parallel]


def test_every_format_has_a_writer() -> None:
    assert set(WRITERS) == set(ALL) == set(SYNTAXES)


# --------------------------------------------------------------------------- streaming parser


def run(fmt: ToolCallFormat, chunks: list[str], **kw: Any) -> tuple[str, list[Call]]:
    """Feed `chunks` one by one; (content, calls) of everything emitted."""
    parser = ToolCallParser(fmt, **kw)
    events = [e for chunk in chunks for e in parser.push(ContentDelta(chunk))] + parser.finish()
    content = "".join(e.text for e in events if isinstance(e, ContentDelta))
    calls = [(e.name, json.loads(e.arguments)) for e in events if isinstance(e, ToolCallDelta)]
    assert [e.call_index for e in events if isinstance(e, ToolCallDelta)] == list(range(len(calls)))
    return content, calls


def assert_every_split(fmt: ToolCallFormat, text: str, content: str, calls: list[Call]) -> None:
    """The same result whole, char by char, and cut in two at every position."""
    assert run(fmt, [text], tools=TOOLS) == (content, calls)
    assert run(fmt, list(text), tools=TOOLS) == (content, calls)
    for cut in range(len(text) + 1):
        got = run(fmt, [text[:cut], text[cut:]], tools=TOOLS)
        assert got == (content, calls), f"split at {cut}: {text[:cut]!r} | {text[cut:]!r}"


@pytest.mark.parametrize("fmt", ALL, ids=lambda f: f.value)
def test_one_call_alone(fmt: ToolCallFormat) -> None:
    assert_every_split(fmt, WRITERS[fmt]([CALL_1]), "", [CALL_1])


@pytest.mark.parametrize("fmt", PARALLEL + [F.LLAMA3_JSON], ids=lambda f: f.value)
def test_parallel_calls_with_content_before_and_after(fmt: ToolCallFormat) -> None:
    before = "" if fmt is F.LLAMA3_JSON else "Let me look that up.\n\n"
    text = before + WRITERS[fmt]([CALL_1, CALL_2]) + "\n\nAnything else?"
    assert_every_split(fmt, text, before.strip() + "Anything else?", [CALL_1, CALL_2])


@pytest.mark.parametrize("fmt", ALL, ids=lambda f: f.value)
def test_plain_text_passes_through_untouched(fmt: ToolCallFormat) -> None:
    text = "Paris is sunny; 3 days: {fine}.\n[1] <b>bold</b> to=you\n"
    assert_every_split(fmt, text, text, [])


@pytest.mark.parametrize("fmt", ALL, ids=lambda f: f.value)
def test_a_partial_marker_is_held_back_then_released(fmt: ToolCallFormat) -> None:
    for trigger in SYNTAXES[fmt].triggers:
        parser = ToolCallParser(fmt)
        shown = parser.push(ContentDelta("Hi " + trigger[:-1]))
        assert shown == [ContentDelta("Hi")], trigger
        assert parser.finish() == [ContentDelta(" " + trigger[:-1])]


@pytest.mark.parametrize("fmt", ALL, ids=lambda f: f.value)
def test_content_never_shows_part_of_a_call(fmt: ToolCallFormat) -> None:
    text = "Sure." + WRITERS[fmt]([CALL_1])
    if fmt is F.LLAMA3_JSON:
        text = WRITERS[fmt]([CALL_1])
    parser = ToolCallParser(fmt)
    shown = ""
    for ch in text:
        for event in parser.push(ContentDelta(ch)):
            if isinstance(event, ContentDelta):
                shown += event.text
        assert "Sure.".startswith(shown) or shown == "Sure.", shown
    assert not [e for e in parser.finish() if isinstance(e, ContentDelta)]


def test_a_call_is_emitted_as_soon_as_it_is_complete() -> None:
    parser = ToolCallParser(F.HERMES)
    first = WRITERS[F.HERMES]([CALL_1])
    events = parser.push(ContentDelta(first[:-1]))
    assert not [e for e in events if isinstance(e, ToolCallDelta)]
    events = parser.push(ContentDelta(first[-1]))
    assert [(e.name, e.call_index) for e in events] == [("get_weather", 0)]


def _broken(fmt: ToolCallFormat) -> str:
    """A call whose arguments are not valid JSON (or not an object)."""
    good = WRITERS[fmt]([CALL_1])
    if fmt in {F.QWEN3_CODER, F.SEED_OSS, F.GLM, F.MINIMAX_M2, F.DEEPSEEK_V3_2, F.DEEPSEEK_V4}:
        return good.replace("get_weather", "get weather")  # not a function name
    if fmt is F.LFM2:
        return good.replace("days=3", "days=3 +")
    return good.replace('"days": 3}', '"days": 3,,}')


@pytest.mark.parametrize("fmt", ALL, ids=lambda f: f.value)
def test_a_broken_call_stays_content(fmt: ToolCallFormat) -> None:
    text = _broken(fmt)
    assert text != WRITERS[fmt]([CALL_1])
    assert_every_split(fmt, text, text, [])


@pytest.mark.parametrize("fmt", [F.HERMES, F.MISTRAL_ARGS, F.DEEPSEEK_V3, F.QWEN3_CODER])
def test_a_broken_call_does_not_hide_the_good_ones(fmt: ToolCallFormat) -> None:
    text = _broken(fmt) + "\n" + WRITERS[fmt]([CALL_2])
    content, calls = run(fmt, [text])
    assert calls == [CALL_2]
    assert content == _broken(fmt)


def test_a_call_cut_off_by_the_end_of_output_is_content() -> None:
    text = 'Ok <tool_call>\n{"name": "get_weather", "arguments": {"loca'
    assert run(F.HERMES, [text]) == (text, [])


def test_a_missing_close_tag_at_the_very_end_is_forgiven() -> None:
    text = '<tool_call>\n{"name": "get_time", "arguments": {}}\n'
    assert run(F.HERMES, [text]) == ("", [("get_time", {})])


@pytest.mark.parametrize(
    "text",
    ['{"answer": 42}', '{"name": "Bob", "age": 3}', "[1, 2]", '{"name": "x", "parameters": 3}'],
)
def test_llama_json_answers_that_are_not_calls_stay_content(text: str) -> None:
    assert_every_split(F.LLAMA3_JSON, text, text, [])


def test_llama_json_only_counts_at_the_start() -> None:
    text = 'Use {"name": "get_time", "parameters": {}} to ask.'
    assert run(F.LLAMA3_JSON, [text]) == (text, [])
    tagged = 'Sure <|python_tag|>{"name": "get_time", "parameters": {}}'
    assert run(F.LLAMA3_JSON, [tagged]) == ("Sure", [("get_time", {})])


def test_mistral_reads_both_spellings_and_call_ids() -> None:
    nemo = '[TOOL_CALLS][{"name": "get_time", "arguments": {"tz": "UTC"}, "id": "abcdefghi"}]'
    small = '[TOOL_CALLS]get_time[CALL_ID]abcdefghi[ARGS]{"tz": "UTC"}'
    for fmt in (F.MISTRAL, F.MISTRAL_ARGS):
        assert run(fmt, [nemo]) == ("", [("get_time", {"tz": "UTC"})])
        assert_every_split(fmt, small, "", [("get_time", {"tz": "UTC"})])


def test_arguments_written_as_a_json_string_are_decoded() -> None:
    text = '<tool_call>{"name": "get_time", "arguments": "{\\"tz\\": \\"UTC\\"}"}</tool_call>'
    assert run(F.HERMES, [text]) == ("", [("get_time", {"tz": "UTC"})])


def test_xml_values_are_typed_by_the_schema() -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "f",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "zip": {"type": "string"},
                        "n": {"type": "integer"},
                        "ok": {"type": "boolean"},
                        "tags": {"type": "array"},
                        "code": {"type": "string"},
                    },
                },
            },
        }
    ]
    code = "def f():\n    return '<b>'\n"
    text = (
        "<tool_call>\n<function=f>\n<parameter=zip>\n01234\n</parameter>\n"
        "<parameter=n>\n7\n</parameter>\n<parameter=ok>\ntrue\n</parameter>\n"
        "<parameter=tags>\n['a', 'b']\n</parameter>\n"
        f"<parameter=code>\n{code}\n</parameter>\n</function>\n</tool_call>"
    )
    want = {"zip": "01234", "n": 7, "ok": True, "tags": ["a", "b"], "code": code}
    assert parse_tool_calls(text, F.QWEN3_CODER, tools=tools)[1][0].arguments == json.dumps(want)
    # Without schemas a value is JSON when it parses as JSON, else text.
    untyped = json.loads(parse_tool_calls(text, F.QWEN3_CODER)[1][0].arguments)
    # "01234" is no JSON number and the list is Python, not JSON: both stay text.
    assert untyped == {**want, "tags": "['a', 'b']"}


def test_qwen3_coder_without_the_wrapper_or_close_tags() -> None:
    text = "<function=get_time>\n<parameter=tz>\nUTC\n<parameter=x>\n1\n</function>"
    assert run(F.QWEN3_CODER, [text]) == ("", [("get_time", {"tz": "UTC", "x": 1})])


def test_deepseek_calls_without_the_section_markers() -> None:
    text = f'{DS_CALL[0]}get_time{DS_SEP}{{"tz": "UTC"}}{DS_CALL[1]}'
    assert_every_split(F.DEEPSEEK_V3, text, "", [("get_time", {"tz": "UTC"})])


def test_gpt_oss_after_reasoning_in_either_header_order() -> None:
    both = (
        "<|start|>assistant<|channel|>commentary to=functions.get_time <|constrain|>json",
        "<|start|>assistant to=functions.get_time<|channel|>commentary json",
    )
    for header in both:
        text = header + '<|message|>{"tz": "UTC"}'
        assert_every_split(F.GPT_OSS, text + "<|call|>", "", [("get_time", {"tz": "UTC"})])
    preamble = "<|channel|>commentary<|message|>Checking.<|end|>"
    assert run(F.GPT_OSS, [preamble]) == (preamble, [])


def test_reasoning_passes_through_untouched() -> None:
    parser = ToolCallParser(F.HERMES)
    assert parser.push(ReasoningDelta("<tool_call>", 0)) == [ReasoningDelta("<tool_call>", 0)]


def test_in_a_pipeline_after_the_reasoning_parser() -> None:
    text = "<think>Need the weather.</think>\n\n" + WRITERS[F.HERMES]([CALL_1])
    pipeline = OutputPipeline(ReasoningParser(index=1), ToolCallParser(F.HERMES, index=1))
    events = coalesce([e for ch in text for e in pipeline.feed(ch)] + pipeline.finish())
    assert events[0] == ReasoningDelta("Need the weather.", 1)
    assert [type(e) for e in events] == [ReasoningDelta, ToolCallDelta]
    call = events[1]
    assert (call.index, call.call_index, call.name) == (1, 0, "get_weather")
    assert json.loads(call.arguments) == CALL_1[1]


# --------------------------------------------------------------------------- ids


def test_ids() -> None:
    assert re.fullmatch(r"call_[A-Za-z0-9]{24}", make_tool_call_id())
    assert re.fullmatch(r"call_[A-Za-z0-9]{24}", make_tool_call_id(F.HERMES))
    for fmt in (F.MISTRAL, F.MISTRAL_ARGS, "mistral"):
        assert re.fullmatch(r"[A-Za-z0-9]{9}", make_tool_call_id(fmt))
    assert len({make_tool_call_id() for _ in range(100)}) == 100


def test_parsers_use_their_family_ids_or_the_given_factory() -> None:
    _, calls = parse_tool_calls(WRITERS[F.MISTRAL]([CALL_1, CALL_2]), F.MISTRAL)
    assert all(re.fullmatch(r"[A-Za-z0-9]{9}", c.id) for c in calls)
    _, calls = parse_tool_calls(WRITERS[F.HERMES]([CALL_1]), F.HERMES)
    assert re.fullmatch(r"call_[A-Za-z0-9]{24}", calls[0].id)
    ids = iter(["a", "b"])
    _, calls = parse_tool_calls(
        WRITERS[F.HERMES]([CALL_1, CALL_2]), "hermes", id_factory=lambda: next(ids)
    )
    assert [c.id for c in calls] == ["a", "b"]
    assert calls[0].to_openai() == {
        "id": "a",
        "type": "function",
        "function": {"name": "get_weather", "arguments": json.dumps(CALL_1[1])},
    }


# --------------------------------------------------------------------------- detection

DETECTED = {
    "Apriel-1.6-15b-Thinker-fixed": F.APRIEL,
    "unsloth-Apriel-1.5": F.APRIEL,
    "Bielik-11B-v3.0-Instruct": F.HERMES,
    "ByteDance-Seed-OSS": F.SEED_OSS,
    "Cohere2MoE": F.COMMAND_R7B,
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use": F.COMMAND_R7B,
    "GLM-4.6": F.GLM,
    "GLM-4.7-Flash": F.GLM,
    "Kimi-K2-Instruct": F.KIMI_K2,
    "Kimi-K2-Thinking": F.KIMI_K2,
    "moonshotai-Kimi-K2": F.KIMI_K2,
    "LFM2.5-8B-A1B": F.LFM2,
    "MiMo-VL": F.HERMES,
    "MiniMax-M1": F.MINIMAX_M1,
    "MiniMax-M2": F.MINIMAX_M2,
    "Mistral-Small-3.2-24B-Instruct-2506": F.MISTRAL_ARGS,
    "mistralai-Ministral-3-14B-Reasoning-2512": F.MISTRAL_ARGS,
    "unsloth-mistral-Devstral-Small-2507": F.MISTRAL_ARGS,
    "mistralai-Mistral-Nemo-Instruct-2407": F.MISTRAL,
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": F.QWEN3_CODER,
    "NVIDIA-Nemotron-Nano-v2": F.NEMOTRON_V2,
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use": F.HERMES,
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": F.HERMES,
    "Qwen-QwQ-32B": F.HERMES,
    "Qwen-Qwen2.5-7B-Instruct": F.HERMES,
    "Qwen-Qwen3-0.6B": F.HERMES,
    "Qwen3-Coder": F.QWEN3_CODER,
    "Qwen3.5-4B": F.QWEN3_CODER,
    "StepFun3.5-Flash": F.QWEN3_CODER,
    "Reka-Edge": F.HERMES,
    "Spark2.5": F.GLM,
    "inclusionai-ling-3.0-flash": F.GLM,
    "poolside-Laguna-S-2.1": F.GLM,
    "poolside-Laguna-XS-2.1": F.GLM,
    "poolside-Laguna-XS.2": F.GLM,
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B": F.DEEPSEEK_R1,
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": F.DEEPSEEK_R1,
    "llama-cpp-deepseek-r1": F.DEEPSEEK_R1,
    "deepseek-ai-DeepSeek-V3.1": F.DEEPSEEK_V3,
    "deepseek-ai-DeepSeek-V3.2": F.DEEPSEEK_V3_2,
    "deepseek-ai-DeepSeek-V4": F.DEEPSEEK_V4,
    "deepseek-ai-DeepSeek-V4-Flash-0731": F.DEEPSEEK_V4,
    "fireworks-ai-llama-3-firefunction-v2": F.FIREFUNCTION_V2,
    "ibm-granite-granite-3.3-2B-Instruct": F.GRANITE,
    "ibm-granite-granite-4.0": F.HERMES,
    "ibm-granite-granite-4.1": F.HERMES,
    "meetkai-functionary-medium-v3.1": F.FUNCTIONARY_V3_1,
    "meta-llama-Llama-3.1-8B-Instruct": F.LLAMA3_JSON,
    "meta-llama-Llama-3.2-3B-Instruct": F.LLAMA3_JSON,
    "meta-llama-Llama-3.3-70B-Instruct": F.LLAMA3_JSON,
    "openai-gpt-oss-120b": F.GPT_OSS,
    "upstage-Solar-Open-100B": F.SOLAR_OPEN,
    # Families without a parser here, or templates without tool calls.
    "Apertus-8B-Instruct": None,
    "CohereForAI-c4ai-command-r-plus-tool_use": None,
    "HuggingFaceTB-SmolLM3-3B": None,
    "Kimi-K3": None,
    "MiniMax-M3": None,
    "google-gemma-2-2b-it": None,
    "google-gemma-4-31B-it": None,
    "meetkai-functionary-medium-v3.2": None,
    "microsoft-Phi-3.5-mini-instruct": None,
    "llama-cpp-rwkv-world": None,
}

needs_templates = pytest.mark.skipif(not TEMPLATES.is_dir(), reason="no template collection")


@needs_templates
@pytest.mark.parametrize("name", sorted(DETECTED))
def test_detection_on_real_templates(name: str) -> None:
    source = (TEMPLATES / f"{name}.jinja").read_text()
    assert tool_call_format(source) is DETECTED[name]


# Templates that render no tool calls for these messages (or need extra variables).
NO_RENDER = {
    "ibm-granite-granite-3.3-2B-Instruct",
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B",
    "fireworks-ai-llama-3-firefunction-v2",
}


def _assistant_part(template: ChatTemplate, calls: list[Call]) -> str:
    """What the template renders for an assistant turn making `calls` (from where the
    generation prompt stops matching, backed up to the previous tag or line)."""
    user = [{"role": "user", "content": "What's the weather?"}]
    tool_calls = [
        {"id": f"abcdefgh{i}", "type": "function", "function": {"name": n, "arguments": a}}
        for i, (n, a) in enumerate(calls)
    ]
    turn = {"role": "assistant", "content": "", "tool_calls": tool_calls}
    prompt = template.render(user, tools=TOOLS, add_generation_prompt=True)
    full = template.render([*user, turn], tools=TOOLS, add_generation_prompt=False)
    n = 0
    while n < min(len(prompt), len(full)) and prompt[n] == full[n]:
        n += 1
    while n > 0 and full[n - 1] not in ">\n":
        n -= 1
    return full[n:]


@needs_templates
@pytest.mark.parametrize(
    "name", sorted(n for n, f in DETECTED.items() if f is not None and n not in NO_RENDER)
)
def test_what_the_template_renders_parses_back(name: str) -> None:
    fmt = DETECTED[name]
    assert fmt is not None
    template = ChatTemplate(
        (TEMPLATES / f"{name}.jinja").read_text(), bos_token="<s>", eos_token="</s>"
    )
    cases = [[CALL_1], [CALL_1, CALL_2]] if SYNTAXES[fmt].parallel else [[CALL_1]]
    for calls in cases:
        _, parsed = parse_tool_calls(_assistant_part(template, calls), fmt, tools=TOOLS)
        assert [(c.name, json.loads(c.arguments)) for c in parsed] == calls


# --------------------------------------------------------------------------- grammars

RICH_TOOLS = [
    WEATHER,
    TIME,
    {"type": "function", "function": {"name": "ping"}},  # no parameters at all
    {
        "type": "function",
        "function": {
            "name": "search",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "minLength": 1},
                    "filters": {
                        "type": "object",
                        "properties": {
                            "lang": {"type": "string", "enum": ["en", "fr"]},
                            "since": {"type": "string", "format": "date"},
                        },
                    },
                    "limit": {"type": "integer", "minimum": 1, "maximum": 50},
                    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
                    "exact": {"type": "boolean"},
                    "mode": {"type": "string", "enum": ["fast", "deep"]},
                    "score": {"type": ["number", "null"]},
                    "extra": {"description": "untyped: any value"},
                    "meta": {"type": "object", "additionalProperties": {"description": "any"}},
                },
                "required": ["query", "mode"],
            },
        },
    },
    {
        "type": "function",
        "function": {"name": "free", "parameters": {"type": "object"}},
    },
]


@pytest.mark.parametrize("fmt", ALL, ids=lambda f: f.value)
def test_grammars_compile(vocab_model, fmt: ToolCallFormat) -> None:
    choices = ["required", {"type": "function", "function": {"name": "search"}}]
    choices += [{"type": "function", "function": {"name": "free"}}, "ping"]
    for choice in choices:
        for parallel in (False, True):
            grammar = tool_call_grammar(fmt, RICH_TOOLS, choice, parallel=parallel)
            assert grammar is not None
            llama_cpp.llama_sampler_free(compile_grammar(vocab_model, grammar))
    with_reasoning = tool_call_grammar(fmt, RICH_TOOLS, "required", reasoning=THINK)
    llama_cpp.llama_sampler_free(compile_grammar(vocab_model, with_reasoning))


@pytest.mark.parametrize("fmt", ALL, ids=lambda f: f.value)
def test_grammar_accepts_the_family_format_and_the_parser_reads_it(
    vocab_model, fmt: ToolCallFormat
) -> None:
    cases = [[CALL_1], [CALL_1, CALL_2]] if fmt in PARALLEL else [[CALL_1]]
    for calls in cases:
        grammar = tool_call_grammar(fmt, TOOLS, "required", parallel=len(calls) > 1)
        text = WRITERS[fmt](calls)
        assert grammar_accepts(vocab_model, grammar, text), text
        assert run(fmt, [text], tools=TOOLS) == ("", calls)
    single = tool_call_grammar(fmt, TOOLS, "required")
    assert not grammar_accepts(vocab_model, single, "Hello")
    assert not grammar_accepts(vocab_model, single, WRITERS[fmt]([("get_weather", {"days": 3})]))
    if fmt in PARALLEL:
        assert not grammar_accepts(vocab_model, single, WRITERS[fmt]([CALL_1, CALL_2]))


def test_named_tool_choice_allows_only_that_tool(vocab_model) -> None:
    grammar = tool_call_grammar(
        F.HERMES, TOOLS, {"type": "function", "function": {"name": "get_time"}}
    )
    assert grammar_accepts(vocab_model, grammar, WRITERS[F.HERMES]([CALL_2]))
    assert not grammar_accepts(vocab_model, grammar, WRITERS[F.HERMES]([CALL_1]))


def test_grammar_lets_the_model_open_its_reasoning(vocab_model) -> None:
    # The engine samples the inside of the block without the grammar: the grammar sees the
    # start marker, then what follows the end marker.
    call = WRITERS[F.HERMES]([CALL_1])
    grammar = tool_call_grammar(F.HERMES, TOOLS, "required", reasoning=THINK)
    assert grammar_accepts(vocab_model, grammar, call)
    assert grammar_accepts(vocab_model, grammar, "<think>\n\n" + call)
    assert not grammar_accepts(vocab_model, grammar, "Hmm.\n\n" + call)
    opened = tool_call_grammar(F.HERMES, TOOLS, "required", reasoning=THINK, reasoning_open=True)
    assert grammar_accepts(vocab_model, opened, "\n\n" + call)
    gpt_oss = tool_call_grammar(
        F.GPT_OSS, TOOLS, "required", reasoning=thinking_markers("<|channel|>analysis<|message|>")
    )
    assert grammar_accepts(
        vocab_model,
        gpt_oss,
        "<|channel|>analysis<|message|><|start|>assistant" + WRITERS[F.GPT_OSS]([CALL_1]),
    )


def test_xml_string_values_cannot_close_early(vocab_model) -> None:
    grammar = tool_call_grammar(F.QWEN3_CODER, TOOLS, "required")
    ok = WRITERS[F.QWEN3_CODER]([("get_weather", {"location": "a <b> </param <<c"})])
    assert grammar_accepts(vocab_model, grammar, ok)
    for end in ("</parameter>", "<parameter=", "</function>"):
        bad = WRITERS[F.QWEN3_CODER]([("get_weather", {"location": f"a <{end} c"})])
        assert not grammar_accepts(vocab_model, grammar, bad), end


def test_tool_choice_values() -> None:
    assert tool_call_grammar(F.HERMES, TOOLS, "auto") is None
    assert tool_call_grammar(F.HERMES, TOOLS, "none") is None
    assert tool_call_grammar(F.HERMES, TOOLS, None) is None
    with pytest.raises(InvalidRequestError):
        tool_call_grammar(F.HERMES, TOOLS, {"type": "function", "function": {"name": "nope"}})
    with pytest.raises(InvalidRequestError):
        tool_call_grammar(F.HERMES, [], "required")
    with pytest.raises(InvalidRequestError):
        tool_call_grammar(F.HERMES, [{"type": "function", "function": {}}], "required")


# --------------------------------------------------------------------------- end to end


def _valid(schema: dict[str, Any], args: dict[str, Any]) -> bool:
    """Enough of JSON-schema validation for the test's flat object schema."""
    kinds = {"string": str, "integer": int, "boolean": bool}
    props = schema["properties"]
    if not set(schema["required"]) <= set(args) or not set(args) <= set(props):
        return False
    for key, value in args.items():
        spec = props[key]
        if not isinstance(value, kinds[spec["type"]]) or value not in spec.get("enum", [value]):
            return False
    return True


WEATHER_SCHEMA = {
    "type": "object",
    "properties": {
        "location": {"type": "string"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["location", "unit"],
}
WEATHER_TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER_SCHEMA}}
]
CHATML_PROMPT = (
    "<|im_start|>system\nYou can call get_weather.<|im_end|>\n"
    "<|im_start|>user\nWhat's the weather in Paris?<|im_end|>\n<|im_start|>assistant\n"
)


@pytest.fixture(scope="module")
def engine():
    from llamactl.engine.engine import Engine, EngineConfig
    from llamactl.engine.model import Model
    from llamactl.models import embedded_model_path

    path = embedded_model_path()
    if path is None:
        pytest.skip("the embedded model is not installed")
    with Engine(Model(path), EngineConfig(n_parallel=1)) as eng:
        yield eng


def _generate(engine, prompt: str, grammar: str, **kw: Any) -> str:
    from llamactl.engine.engine import GenerationRequest
    from llamactl.engine.types import SamplingParams

    tokens = engine.model.tokenize(prompt, add_special=False)
    request = GenerationRequest(tokens, SamplingParams(temperature=0, grammar=grammar), 200, **kw)
    texts, dones = engine.submit(request).collect()
    assert dones[0].finish_reason == "stop", texts[0]
    return texts[0]


@pytest.mark.slow
def test_the_engine_writes_a_valid_call_under_the_grammar(engine) -> None:
    grammar = tool_call_grammar(F.HERMES, WEATHER_TOOLS, "required")
    content, calls = parse_tool_calls(
        _generate(engine, CHATML_PROMPT, grammar), F.HERMES, tools=WEATHER_TOOLS
    )
    assert content == "" and len(calls) == 1
    assert calls[0].name == "get_weather"
    assert _valid(WEATHER_SCHEMA, json.loads(calls[0].arguments))


@pytest.mark.slow
def test_the_engine_reasons_freely_then_writes_the_call(engine) -> None:
    from llamactl.engine.engine import ReasoningSpec

    end_tokens = tuple(engine.model.tokenize("\n</think>\n\n", add_special=False))
    spec = ReasoningSpec(THINK.start, THINK.end, end_tokens, open=True, budget=8)
    grammar = tool_call_grammar(
        F.HERMES, WEATHER_TOOLS, "required", reasoning=THINK, reasoning_open=True
    )
    text = _generate(engine, CHATML_PROMPT + "<think>\n", grammar, reasoning=spec)
    pipeline = OutputPipeline(
        ReasoningParser(starts_in_reasoning=True), ToolCallParser(F.HERMES, tools=WEATHER_TOOLS)
    )
    events = pipeline.feed(text) + pipeline.finish()
    assert [type(e) for e in events] == [ReasoningDelta, ToolCallDelta], text
    assert _valid(WEATHER_SCHEMA, json.loads(events[1].arguments))


def test_a_call_cut_off_by_max_tokens_is_dropped() -> None:
    """After cut_off (finish "length"), an unfinished call or trigger is no content."""
    for text, content in [
        ('Ok <tool_call>\n{"name": "get_weather", "arguments": {"loca', "Ok"),
        ("Ok <tool_", "Ok"),
        ("just text", "just text"),
    ]:
        parser = ToolCallParser(F.HERMES)
        events = parser.push(ContentDelta(text))
        parser.cut_off()
        events += parser.finish()
        assert "".join(e.text for e in events if isinstance(e, ContentDelta)) == content
    done = '<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>\n<tool_call>\n{"na'
    parser = ToolCallParser(F.HERMES)
    events = parser.push(ContentDelta(done))
    parser.cut_off()
    events += parser.finish()
    assert [e.name for e in events if isinstance(e, ToolCallDelta)] == ["f"]
    assert not [e for e in events if isinstance(e, ContentDelta)]


# ------------------------------------------------------------------------------------ fuzz


def _mutations(text: str, markers: tuple[str, ...], rng: random.Random) -> list[tuple[str, bool]]:
    """(text, cut) pairs: every prefix (cut by max_tokens or not), each marker duplicated where
    it occurs, and characters dropped, doubled or replaced at random places."""
    out = [(text[:i], cut) for i in range(len(text) + 1) for cut in (False, True)]
    for marker in markers:
        at = text.find(marker)
        while at != -1:
            out.append((text[:at] + marker + text[at:], False))
            at = text.find(marker, at + 1)
    for _ in range(40):
        i = rng.randrange(len(text))
        out.append((text[:i] + text[i + 1 :], False))
        out.append((text[:i] + text[i] + text[i:], False))
        out.append((text[:i] + rng.choice('{}[]"<>,:\\\n') + text[i + 1 :], False))
    return out


def _chunked(text: str, rng: random.Random) -> list[str]:
    chunks, i = [], 0
    while i < len(text):
        n = rng.randint(1, 7)
        chunks.append(text[i : i + n])
        i += n
    return chunks


def _check_stream(parser: Any, chunks: list[str], cut: bool) -> None:
    events = [e for chunk in chunks for e in parser.push(ContentDelta(chunk))]
    if cut:
        parser.cut_off()
    events += parser.finish()
    calls = [e for e in events if isinstance(e, ToolCallDelta)]
    assert [c.call_index for c in calls] == list(range(len(calls)))
    for call in calls:
        assert isinstance(call.name, str) and call.name
        assert isinstance(json.loads(call.arguments), dict)
    assert all(isinstance(e, ContentDelta | ToolCallDelta) for e in events)


@pytest.mark.parametrize("fmt", ALL, ids=lambda f: f.value)
def test_fuzzed_calls_never_break_the_stream(fmt: ToolCallFormat) -> None:
    """A cut, duplicated or garbled call ends cleanly: content and well-formed calls only."""
    rng = random.Random(fmt.value)
    calls = [CALL_1, CALL_2] if fmt in PARALLEL else [CALL_1]
    text = "Checking.\n" + WRITERS[fmt](calls)
    syntax = SYNTAXES[fmt]
    for mutated, cut in _mutations(text, tuple(syntax.triggers), rng):
        for chunks in ([mutated], _chunked(mutated, rng)):
            _check_stream(ToolCallParser(fmt, tools=TOOLS), chunks, cut)


def test_fuzzed_generic_replies_never_break_the_stream() -> None:
    from llamactl.engine.chat.generic_tools import GenericReplyParser

    rng = random.Random(7)
    text = (
        '{"tool_calls": [{"name": "get_weather", "arguments": {"location": "Paris, FR"}}, '
        '{"name": "get_time", "arguments": {"tz": "UTC"}}]}'
    )
    answer = '{"response": "It is \\"sunny\\" \\u00e9\\ud83d\\ude00 today."}'
    for source in (text, answer):
        for mutated, cut in _mutations(source, ('{"tool_call', '{"response": "', "\\u"), rng):
            for chunks in ([mutated], _chunked(mutated, rng)):
                _check_stream(GenericReplyParser(), chunks, cut)
