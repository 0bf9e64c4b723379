"""Which tool-call format a model uses, read off its chat template.

A template renders past assistant tool calls exactly the way the model writes new ones, so the
markers in its source name the family. Checks run most specific first: several families share
a marker such as "<tool_call>" and differ in what follows it.
"""

from __future__ import annotations

from collections.abc import Callable

from llamactl.engine.chat.tool_formats.base import ToolCallFormat
from llamactl.engine.chat.tool_formats.registry import DS_CALLS_BEGIN, DSML

F = ToolCallFormat


def _all(*needles: str) -> Callable[[str], bool]:
    return lambda source: all(needle in source for needle in needles)


# (test, format); None marks a family we recognise but do not parse, so nothing later claims it.
_RULES: tuple[tuple[Callable[[str], bool], ToolCallFormat | None], ...] = (
    (_all("]<]minimax[>["), None),  # MiniMax M3's namespaced tags
    (_all(DSML, "tool_calls>"), F.DEEPSEEK_V4),
    (_all(DSML), F.DEEPSEEK_V3_2),
    (_all(DS_CALLS_BEGIN, "```json"), F.DEEPSEEK_R1),
    (_all(DS_CALLS_BEGIN), F.DEEPSEEK_V3),
    (_all("<|tool_calls_section_begin|>"), F.KIMI_K2),
    (_all("<minimax:tool_call>"), F.MINIMAX_M2),
    (_all("<seed:tool_call>"), F.SEED_OSS),
    (_all("[TOOL_CALLS]", "[ARGS]"), F.MISTRAL_ARGS),
    (_all("[TOOL_CALLS]"), F.MISTRAL),
    (_all("<|tool_call_start|>"), F.LFM2),
    (_all("<|START_ACTION|>"), F.COMMAND_R7B),
    (_all("functools["), F.FIREFUNCTION_V2),
    (_all("<TOOLCALL>"), F.NEMOTRON_V2),
    (_all("<tool_calls>["), F.APRIEL),
    (_all("<tool_calls>"), F.MINIMAX_M1),
    (_all("<|tool_call:begin|>"), F.SOLAR_OPEN),
    (_all("<|channel|>", "functions."), F.GPT_OSS),
    (_all("<tool_call>", "<function="), F.QWEN3_CODER),
    (_all("<function="), F.FUNCTIONARY_V3_1),
    (_all("<arg_key>"), F.GLM),
    (_all("<|tool_call|>"), F.GRANITE),
    (_all("<tool_call>"), F.HERMES),
    (_all('"parameters": ', '{"name": "'), F.LLAMA3_JSON),
)


def tool_call_format(template_source: str) -> ToolCallFormat | None:
    """The format this template's model writes tool calls in, or None when unknown."""
    for matches, found in _RULES:
        if matches(template_source):
            return found
    return None
