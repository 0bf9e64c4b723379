"""Which markers a model wraps its reasoning in, read off its chat template.

The template is the only place a GGUF tells us how the model thinks: it renders past reasoning
between the same markers the model emits, so spotting them in the source lets us split live output.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class ThinkingMarkers:
    """Reasoning sits between `start` and `end`; `content_prefixes` are channel headers some
    families put before the answer (gpt-oss, Cohere, Solar...) and that belong to neither side."""

    start: str
    end: str
    content_prefixes: tuple[str, ...] = ()
    family: str = "think"


THINK = ThinkingMarkers("<think>", "</think>")


def _hunyuan_markers(source: str) -> ThinkingMarkers | None:
    # Tencent Hy3 builds its tokens with str.format from a suffix variable, e.g. ':opensource'.
    suffix = re.search(r"set\s+HYTK\s*=\s*['\"]([^'\"]*)['\"]", source)
    if suffix is None or "'<think{}>'" not in source:
        return None
    tag = suffix.group(1)
    return ThinkingMarkers(f"<think{tag}>", f"</think{tag}>", family="hunyuan")


def _contains(*needles: str) -> Callable[[str], bool]:
    return lambda source: all(needle in source for needle in needles)


# Most specific first: several families also mention a bare "<think>" somewhere in their source.
_FAMILIES: tuple[tuple[Callable[[str], bool], ThinkingMarkers], ...] = (
    (
        _contains("<|channel|>analysis<|message|>"),
        ThinkingMarkers(
            "<|channel|>analysis<|message|>",
            "<|end|>",
            ("<|start|>assistant<|channel|>final<|message|>", "<|channel|>final<|message|>"),
            family="gpt-oss",
        ),
    ),
    (
        _contains("assistant to=self<|message|>"),
        ThinkingMarkers(
            "to=self<|message|>",
            "<|eom|>",
            ("<|start|>assistant to=user<|message|>", "to=user<|message|>"),
            family="atem",
        ),
    ),
    (
        _contains("'<|open|>'", "open_tag('think"),
        ThinkingMarkers(
            "<|open|>think<|sep|>",
            "<|close|>think<|sep|>",
            ("<|open|>response<|sep|>",),
            family="kimi-tags",
        ),
    ),
    (_contains("<seed:think>"), ThinkingMarkers("<seed:think>", "</seed:think>", family="seed")),
    (_contains("<mm:think>"), ThinkingMarkers("<mm:think>", "</mm:think>", family="minimax")),
    (
        _contains("<|START_THINKING|>"),
        ThinkingMarkers(
            "<|START_THINKING|>",
            "<|END_THINKING|>",
            ("<|START_RESPONSE|>", "<|START_TEXT|>"),
            family="cohere",
        ),
    ),
    (_contains("[THINK]"), ThinkingMarkers("[THINK]", "[/THINK]", family="mistral")),
    (
        _contains("<|channel>", "<channel|>"),
        ThinkingMarkers("<|channel>thought", "<channel|>", family="gemma"),
    ),
    (
        _contains("assistant<|think|>"),
        ThinkingMarkers(
            "<|think|>",
            "<|end|>",
            ("<|begin|>assistant<|content|>", "<|content|>"),
            family="solar",
        ),
    ),
    (
        _contains("<|inner_prefix|>"),
        ThinkingMarkers("<|inner_prefix|>", "<|inner_suffix|>", family="apertus"),
    ),
    (
        _contains("[BEGIN FINAL RESPONSE]"),
        ThinkingMarkers("Here are my reasoning steps:", "[BEGIN FINAL RESPONSE]", family="apriel"),
    ),
    (
        _contains("<think></think>", "<response></response>"),
        ThinkingMarkers("<think>", "</think>", ("<response>",), family="granite"),
    ),
    (_contains("</think>"), THINK),
)


def thinking_markers(template_source: str) -> ThinkingMarkers | None:
    """The reasoning markers this template's model uses, or None for a non-reasoning model."""
    hunyuan = _hunyuan_markers(template_source)
    if hunyuan is not None:
        return hunyuan
    for matches, markers in _FAMILIES:
        if matches(template_source):
            return markers
    return None


_TOGGLES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (
        name,
        re.compile(
            rf"(?<![.\w]){name} is (?:not )?(?:defined|undefined)"
            rf"|(?:if|elif) (?:not )?{name}\b(?!\s*[.(\[])"
            rf"|(?<![.\w]){name}\s*\|\s*default\b"
        ),
    )
    for name in ("enable_thinking", "thinking", "reasoning")
)


def thinking_toggle(template_source: str) -> str | None:
    """The boolean template variable that switches thinking on or off, if the template has one.

    Most templates read `enable_thinking`; Kimi K3 and Granite read `thinking`, Cohere `reasoning`.
    """
    for name, pattern in _TOGGLES:
        if pattern.search(template_source):
            return name
    return None


def supports_enable_thinking(template_source: str) -> bool:
    """Whether the template reads the `enable_thinking` variable (Qwen3 and most others)."""
    return thinking_toggle(template_source) == "enable_thinking"


def prompt_opens_reasoning(prompt: str, markers: ThinkingMarkers | None) -> bool:
    """Whether a rendered prompt already opened the reasoning block (e.g. ends with "<think>\\n").

    Then the model's first tokens are reasoning although it never emits the start marker itself.
    """
    if markers is None:
        return False
    return prompt.rstrip().endswith(markers.start)
