"""The vocabulary shared by the tool-call formats: format names, parsed calls, format syntax."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

from llamactl.engine.chat.tool_formats.cursor import Cursor

if TYPE_CHECKING:
    from llamactl.engine.chat.tool_formats.gbnf import GrammarBuilder


class ToolCallFormat(str, Enum):
    """How a model family writes tool calls in its output (named after the family)."""

    HERMES = "hermes"  # <tool_call>{"name": ..., "arguments": ...}</tool_call>: Qwen2.5/3, Hermes
    QWEN3_CODER = "qwen3-coder"  # <tool_call><function=f><parameter=p>v</parameter>...
    SEED_OSS = "seed-oss"  # the same inside <seed:tool_call>
    GLM = "glm"  # <tool_call>f<arg_key>p</arg_key><arg_value>v</arg_value></tool_call>
    FUNCTIONARY_V3_1 = "functionary-v3.1"  # <function=f>{...}</function>
    LLAMA3_JSON = "llama3-json"  # {"name": ..., "parameters": ...} as the whole answer
    MISTRAL = "mistral"  # [TOOL_CALLS][{"name": ..., "arguments": ...}, ...]
    MISTRAL_ARGS = "mistral-args"  # [TOOL_CALLS]f[ARGS]{...}
    GRANITE = "granite"  # <|tool_call|>[{"name": ..., "arguments": ...}]
    DEEPSEEK_R1 = "deepseek-r1"  # <｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json ...
    DEEPSEEK_V3 = "deepseek-v3"  # <｜tool▁call▁begin｜>f<｜tool▁sep｜>{...}<｜tool▁call▁end｜>
    DEEPSEEK_V3_2 = "deepseek-v3.2"  # <｜DSML｜function_calls><｜DSML｜invoke name="f">...
    DEEPSEEK_V4 = "deepseek-v4"  # <｜DSML｜tool_calls><｜DSML｜invoke name="f">...
    KIMI_K2 = "kimi-k2"  # <|tool_calls_section_begin|><|tool_call_begin|>functions.f:0...
    MINIMAX_M2 = "minimax-m2"  # <minimax:tool_call><invoke name="f"><parameter name="p">...
    MINIMAX_M1 = "minimax-m1"  # <tool_calls>{"name": ..., "arguments": ...}\n...</tool_calls>
    APRIEL = "apriel"  # <tool_calls>[{"name": ..., "arguments": ...}]</tool_calls>
    NEMOTRON_V2 = "nemotron-v2"  # <TOOLCALL>[{"name": ..., "arguments": ...}]</TOOLCALL>
    COMMAND_R7B = "command-r7b"  # <|START_ACTION|>[{"tool_name": ..., "parameters": ...}]
    FIREFUNCTION_V2 = "firefunction-v2"  # functools[{"name": ..., "arguments": ...}]
    SOLAR_OPEN = "solar-open"  # <|tool_calls|><|tool_call:begin|>id<|tool_call:name|>f...
    GPT_OSS = "gpt-oss"  # <|channel|>commentary to=functions.f <|constrain|>json<|message|>{}
    LFM2 = "lfm2"  # <|tool_call_start|>[f(p=1)]<|tool_call_end|>


@dataclass(frozen=True)
class ParsedCall:
    """One call read out of the text, before it gets an id."""

    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ToolSpec:
    """A callable function: its name and the JSON schema of its arguments object."""

    name: str
    parameters: Mapping[str, Any]


# Tool name → JSON schema of its arguments; XML-style formats need it to type their values.
Schemas = Mapping[str, Mapping[str, Any]]

Reader = Callable[[Cursor, Schemas], list[ParsedCall]]
GrammarFn = Callable[["GrammarBuilder", Sequence[ToolSpec], bool], str]


@dataclass(frozen=True)
class Syntax:
    """Where a format's calls start and end, how to read one, and how to force one (GBNF).

    Output is scanned for `triggers` anywhere (and `start_triggers` only at its start). A
    trigger opens a section: a run of calls, each starting with one of `call_starts`, separated
    by whitespace or `separators` and optionally ended by one of `closers`. A trigger that is
    not itself a call start (e.g. DeepSeek's "calls begin") is a section opener.
    """

    triggers: tuple[str, ...]
    call_starts: tuple[str, ...]
    read: Reader
    grammar: GrammarFn
    start_triggers: tuple[str, ...] = ()
    closers: tuple[str, ...] = ()
    separators: str = ""
    parallel: bool = True  # whether the family has a way to write several calls at once
    after_reasoning: str = ""  # what a model writes between its reasoning and its calls
