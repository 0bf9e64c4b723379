"""Model output → chat events, as a chain of stages.

The first stage turns raw text into deltas (reasoning vs content); later stages rewrite deltas,
e.g. a tool-call stage that pulls calls out of content. Each stage only holds back what it
cannot decide yet, so the chain streams as well as its slowest stage.
"""

from __future__ import annotations

from typing import Protocol

from llamactl.engine.chat.markers import ThinkingMarkers, prompt_opens_reasoning
from llamactl.engine.chat.reasoning import ChatDelta, ReasoningParser, coalesce
from llamactl.engine.types import ContentDelta


class TextStage(Protocol):
    """First stage: consumes generated text."""

    def feed(self, text: str) -> list[ChatDelta]: ...

    def finish(self) -> list[ChatDelta]: ...


class DeltaStage(Protocol):
    """Later stage: consumes the previous stage's deltas (and passes on what it ignores)."""

    def push(self, delta: ChatDelta) -> list[ChatDelta]: ...

    def finish(self) -> list[ChatDelta]: ...


class PlainTextParser:
    """For models without reasoning markers: all output is content."""

    def __init__(self, index: int = 0) -> None:
        self.index = index
        self.in_reasoning = False

    def feed(self, text: str) -> list[ChatDelta]:
        return [ContentDelta(text, self.index)] if text else []

    def finish(self) -> list[ChatDelta]:
        return []


class OutputPipeline:
    """A text stage followed by any number of delta stages, used like a single parser."""

    def __init__(self, first: TextStage, *stages: DeltaStage) -> None:
        self.first = first
        self.stages = stages

    def feed(self, text: str) -> list[ChatDelta]:
        deltas = self.first.feed(text)
        for stage in self.stages:
            deltas = _push_all(stage, deltas)
        return coalesce(deltas)

    def finish(self) -> list[ChatDelta]:
        deltas = self.first.finish()
        for stage in self.stages:
            # What the previous stage flushed goes in before this stage flushes in turn.
            deltas = _push_all(stage, deltas) + stage.finish()
        return coalesce(deltas)


def _push_all(stage: DeltaStage, deltas: list[ChatDelta]) -> list[ChatDelta]:
    return [out for delta in deltas for out in stage.push(delta)]


def output_parser(
    markers: ThinkingMarkers | None, prompt: str = "", *, index: int = 0
) -> ReasoningParser | PlainTextParser:
    """The text stage for a model: reasoning-aware when its template has markers.

    `prompt` is the rendered prompt; when it already opened the reasoning block the parser
    starts inside it.
    """
    if markers is None:
        return PlainTextParser(index)
    return ReasoningParser.from_markers(
        markers, starts_in_reasoning=prompt_opens_reasoning(prompt, markers), index=index
    )
