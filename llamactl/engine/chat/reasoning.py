"""Splitting a model's output into reasoning and answer while it streams.

Markers such as "<think>" arrive cut across tokens ("<th", "ink>"), so the parser holds back any
tail that could still become a marker and emits it only once it is known to be plain text; a
client therefore never sees a stray half-marker in either channel.
"""

from __future__ import annotations

from dataclasses import replace
from enum import Enum, auto

from llamactl.engine.chat.markers import THINK, ThinkingMarkers
from llamactl.engine.types import ContentDelta, ReasoningDelta, ToolCallDelta

# A delta of one choice: text from the first stage, tool calls from a later one.
ChatDelta = ReasoningDelta | ContentDelta | ToolCallDelta


class _State(Enum):
    OPENING = auto()  # output start: a start marker (or a content header) may come first
    REASONING = auto()  # inside the reasoning block
    HEADER = auto()  # just after the end marker: whitespace and an optional content header
    LEADING = auto()  # answer started: drop leading whitespace
    CONTENT = auto()  # everything else is answer text, passed through


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest tail of `text` that is a proper prefix of `marker`."""
    for size in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-size:]):
            return size
    return 0


def coalesce(events: list[ChatDelta]) -> list[ChatDelta]:
    """Merge neighbouring deltas of one kind and drop empty ones, so callers send fewer chunks."""
    merged: list[ChatDelta] = []
    for event in events:
        # Only text deltas merge; tool calls (from a later stage) pass through untouched.
        if isinstance(event, ToolCallDelta):
            merged.append(event)
            continue
        if not event.text:
            continue
        last = merged[-1] if merged else None
        if (
            isinstance(last, (ReasoningDelta, ContentDelta))
            and type(last) is type(event)
            and last.index == event.index
        ):
            merged[-1] = replace(last, text=last.text + event.text)
        else:
            merged.append(event)
    return merged


class ReasoningParser:
    """Streaming splitter: `feed` text as it is generated, then `finish` once at the end.

    Reasoning is recognised only at the start of the output (as models emit it); after the end
    marker everything is answer text. Leading whitespace of either part and the whitespace just
    before the end marker are dropped.
    """

    def __init__(
        self,
        start_marker: str = THINK.start,
        end_marker: str = THINK.end,
        starts_in_reasoning: bool = False,
        *,
        content_prefixes: tuple[str, ...] = (),
        index: int = 0,
        continues_text: bool = False,
    ) -> None:
        """`continues_text`: the output continues text the prompt already holds (assistant
        prefill), so nothing is stripped and no start marker is looked for."""
        if not start_marker or not end_marker:
            raise ValueError("reasoning markers must be non-empty")
        self.start_marker = start_marker
        self.end_marker = end_marker
        self.content_prefixes = content_prefixes
        self.index = index  # the choice these events belong to, when n > 1
        self._state = _State.REASONING if starts_in_reasoning else _State.OPENING
        if continues_text and not starts_in_reasoning:
            self._state = _State.CONTENT
        self._pending = ""
        self._reasoning_started = continues_text
        self._steps = {
            _State.OPENING: self._opening,
            _State.REASONING: self._reasoning,
            _State.HEADER: self._header,
            _State.LEADING: self._leading,
            _State.CONTENT: self._content,
        }

    @classmethod
    def from_markers(
        cls,
        markers: ThinkingMarkers,
        *,
        starts_in_reasoning: bool = False,
        index: int = 0,
        continues_text: bool = False,
    ) -> ReasoningParser:
        return cls(
            markers.start,
            markers.end,
            starts_in_reasoning,
            content_prefixes=markers.content_prefixes,
            index=index,
            continues_text=continues_text,
        )

    @property
    def in_reasoning(self) -> bool:
        return self._state is _State.REASONING

    def feed(self, text: str) -> list[ChatDelta]:
        self._pending += text
        return coalesce(self._drain(final=False))

    def finish(self) -> list[ChatDelta]:
        """Flush held-back text: at the end a partial marker is just text."""
        return coalesce(self._drain(final=True))

    def _drain(self, final: bool) -> list[ChatDelta]:
        events: list[ChatDelta] = []
        while self._steps[self._state](final, events):
            pass
        return events

    # Each step consumes what it can from `_pending` and returns whether to keep going.

    def _opening(self, final: bool, events: list[ChatDelta]) -> bool:
        head = self._pending.lstrip()
        if head.startswith(self.start_marker):
            self._pending = head[len(self.start_marker) :]
            self._state = _State.REASONING
            return True
        if self._take_content_prefix(head):
            return True
        candidates = (self.start_marker, *self.content_prefixes)
        if not final and any(marker.startswith(head) for marker in candidates):
            return False  # still undecided (this includes whitespace-only output so far)
        self._state = _State.CONTENT
        return True

    def _reasoning(self, final: bool, events: list[ChatDelta]) -> bool:
        if not self._reasoning_started:
            self._pending = self._pending.lstrip()
        end = self._pending.find(self.end_marker)
        if end >= 0:
            self._emit_reasoning(self._pending[:end].rstrip(), events)
            self._pending = self._pending[end + len(self.end_marker) :]
            self._state = _State.HEADER
            return True
        if final:
            self._emit_reasoning(self._pending.rstrip(), events)
            self._pending = ""
            return False
        held = _partial_suffix(self._pending, self.end_marker)
        ready = self._pending[: len(self._pending) - held]
        # Whitespace right before the end marker is dropped, so hold it until text follows.
        text = ready.rstrip()
        self._emit_reasoning(text, events)
        self._pending = self._pending[len(text) :]
        return False

    def _header(self, final: bool, events: list[ChatDelta]) -> bool:
        head = self._pending.lstrip()
        if self._take_content_prefix(head):
            return True
        if not final and any(prefix.startswith(head) for prefix in self.content_prefixes):
            self._pending = head
            return False
        self._pending = head
        self._state = _State.LEADING
        return True

    def _leading(self, final: bool, events: list[ChatDelta]) -> bool:
        self._pending = self._pending.lstrip()
        if not self._pending:
            return False
        self._state = _State.CONTENT
        return True

    def _content(self, final: bool, events: list[ChatDelta]) -> bool:
        events.append(ContentDelta(self._pending, self.index))
        self._pending = ""
        return False

    def _emit_reasoning(self, text: str, events: list[ChatDelta]) -> None:
        if text:
            events.append(ReasoningDelta(text, self.index))
            self._reasoning_started = True

    def _take_content_prefix(self, head: str) -> bool:
        for prefix in self.content_prefixes:
            if head.startswith(prefix):
                self._pending = head[len(prefix) :]
                self._state = _State.LEADING
                return True
        return False


class RawAndReasoning:
    """`deepseek-legacy`: content is the raw output (the markers kept, as old clients parse
    them); the reasoning is also split out, by a `ReasoningParser` fed the same text."""

    def __init__(self, parser: ReasoningParser, *, opened: bool) -> None:
        self.parser = parser
        self.index = parser.index
        # A prompt that opened the block already printed its start marker: show it in content.
        self._prefix = parser.start_marker if opened else ""

    @property
    def in_reasoning(self) -> bool:
        return self.parser.in_reasoning

    def feed(self, text: str) -> list[ChatDelta]:
        return self._with_raw(self.parser.feed(text), text)

    def finish(self) -> list[ChatDelta]:
        return self._with_raw(self.parser.finish(), "")

    def _with_raw(self, deltas: list[ChatDelta], text: str) -> list[ChatDelta]:
        out: list[ChatDelta] = [d for d in deltas if isinstance(d, ReasoningDelta)]
        if text:
            out.append(ContentDelta(self._prefix + text, self.index))
            self._prefix = ""
        return out


def split_reasoning(
    text: str,
    markers: ThinkingMarkers = THINK,
    *,
    starts_in_reasoning: bool = False,
) -> tuple[str, str]:
    """(reasoning, content) of a complete output; the same rules as the streaming parser."""
    parser = ReasoningParser.from_markers(markers, starts_in_reasoning=starts_in_reasoning)
    events = parser.feed(text) + parser.finish()
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    content = "".join(e.text for e in events if isinstance(e, ContentDelta))
    return reasoning, content
