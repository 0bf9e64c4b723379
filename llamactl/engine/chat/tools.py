"""Tool calls in chat output: pulled out of the stream as they complete, or forced by grammar.

`ToolCallParser` is a pipeline stage after the reasoning parser. It lets content through, holds
back only what might be the start of a call marker, and turns each finished call into one
`ToolCallDelta`. Text that looked like a call but is not one (broken JSON, a stray marker) is
released as content: the model's text is never dropped, only moved into calls.
"""

from __future__ import annotations

import json
import secrets
import string
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llamactl.core.errors import InvalidRequestError
from llamactl.engine.chat.markers import ThinkingMarkers
from llamactl.engine.chat.reasoning import ChatDelta
from llamactl.engine.chat.tool_formats import SYNTAXES, ToolCallFormat, ToolSpec, tool_call_format
from llamactl.engine.chat.tool_formats.base import ParsedCall
from llamactl.engine.chat.tool_formats.cursor import WS, Cursor, Memo, NeedMore, NotACall
from llamactl.engine.chat.tool_formats.gbnf import GrammarBuilder, literal
from llamactl.engine.types import ContentDelta, ToolCallDelta

__all__ = [
    "ToolCall",
    "ToolCallFormat",
    "ToolCallParser",
    "after_reasoning",
    "chosen_tools",
    "make_tool_call_id",
    "parse_tool_calls",
    "tool_call_format",
    "tool_call_grammar",
]

_ALNUM = string.ascii_letters + string.digits
_MISTRAL = {ToolCallFormat.MISTRAL, ToolCallFormat.MISTRAL_ARGS}


@dataclass(frozen=True)
class ToolCall:
    """A complete call: `arguments` is the JSON text of an object, as OpenAI sends it."""

    id: str
    name: str
    arguments: str

    def to_openai(self) -> dict[str, Any]:
        """The `tool_calls` entry of an OpenAI chat message."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


def make_tool_call_id(format: ToolCallFormat | str | None = None) -> str:
    """A fresh call id: "call_" + 24 letters/digits, or 9 for Mistral, whose templates reject
    any other id when the call comes back in the history."""
    if format is not None and ToolCallFormat(format) in _MISTRAL:
        return "".join(secrets.choice(_ALNUM) for _ in range(9))
    return "call_" + "".join(secrets.choice(_ALNUM) for _ in range(24))


def tool_specs(tools: Iterable[Mapping[str, Any]] | None) -> list[ToolSpec]:
    """Name and argument schema of each tool (OpenAI's {"type": "function", "function": {...}}
    or the bare function object)."""
    specs = []
    for tool in tools or ():
        function = tool.get("function", tool)
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            raise InvalidRequestError("each tool needs a function with a name")
        schema = function.get("parameters") or function.get("input_schema") or {}
        if not isinstance(schema, Mapping):
            raise InvalidRequestError(f"tool {function['name']!r}: parameters must be an object")
        specs.append(ToolSpec(function["name"], schema))
    return specs


def _schemas(tools: Iterable[Mapping[str, Any]] | None) -> dict[str, Mapping[str, Any]]:
    """Argument schemas by tool name, skipping malformed tools: the parser only uses them to
    type values, and must not fail a generation that is already running."""
    try:
        return {spec.name: spec.parameters for spec in tool_specs(tools)}
    except (InvalidRequestError, AttributeError, TypeError):
        return {}


@dataclass
class _Section:
    """A run of calls being read; offsets are into the parser's held text."""

    trigger_at: int
    trigger: str
    pos: int  # where the next call (or the section's end) is expected
    calls: int = 0


class ToolCallParser:
    """DeltaStage: ContentDelta in; ContentDelta and ToolCallDelta out (others pass through)."""

    def __init__(
        self,
        format: ToolCallFormat | str,
        index: int = 0,
        id_factory: Callable[[], str] | None = None,
        *,
        tools: Iterable[Mapping[str, Any]] | None = None,
    ) -> None:
        self.format = ToolCallFormat(format)
        self.syntax = SYNTAXES[self.format]
        self.index = index
        self._new_id = id_factory or (lambda: make_tool_call_id(self.format))
        self._schemas = _schemas(tools)
        self._text = ""  # content not yet passed on
        self._section: _Section | None = None
        self._scans: Memo = {}  # scan progress over the open section's text
        self._calls = 0
        self._started = False  # content or calls went out: start-only triggers are off
        self._after_calls = False  # whitespace right after calls is dropped
        self._cut = False  # see cut_off

    @property
    def calls(self) -> int:
        """How many tool calls were emitted so far."""
        return self._calls

    def push(self, delta: ChatDelta) -> list[ChatDelta]:
        if not isinstance(delta, ContentDelta):
            return [delta]
        self._text += delta.text
        return self._drain(final=False)

    def finish(self) -> list[ChatDelta]:
        """Flush: an unfinished call is content after all, a partial marker just text;
        after `cut_off`, both are dropped."""
        return self._drain(final=True)

    def cut_off(self) -> None:
        """The answer was cut (max_tokens, the context): an unfinished call or a partial
        trigger at the end is the start of a call, not content, so `finish` drops it rather
        than hand raw call markup to the client as text."""
        self._cut = True

    def _drain(self, final: bool) -> list[ChatDelta]:
        out: list[ChatDelta] = []
        while self._read_section(final, out) if self._section else self._scan(final, out):
            pass
        return out

    # Content: pass text on up to the first trigger.

    def _scan(self, final: bool, out: list[ChatDelta]) -> bool:
        hit = self._find_trigger()
        if hit is None:
            held = 0 if final and not self._cut else self._held_back()
            ready = self._text[: len(self._text) - held]
            if not final or held:
                ready = ready.rstrip(WS)  # trailing space waits: it is dropped before a call
            self._emit(ready, out)
            self._text = self._text[len(ready) :]
            return False
        at, trigger = hit
        lead = len(self._text[:at].rstrip(WS))
        self._emit(self._text[:lead], out)
        self._text = self._text[lead:]
        at -= lead
        pos = at if trigger in self.syntax.call_starts else at + len(trigger)
        self._section = _Section(at, trigger, pos)
        return True

    def _find_trigger(self) -> tuple[int, str] | None:
        best: tuple[int, str] | None = None
        for trigger in self.syntax.triggers:
            at = self._text.find(trigger)
            if at >= 0 and (best is None or (at, -len(trigger)) < (best[0], -len(best[1]))):
                best = (at, trigger)
        if not self._started:
            head = self._text.lstrip(WS)
            at = len(self._text) - len(head)
            for trigger in self.syntax.start_triggers:
                if head.startswith(trigger) and (best is None or at < best[0]):
                    best = (at, trigger)
        return best

    def _held_back(self) -> int:
        """Length of the tail that could still grow into a trigger."""
        text = self._text
        if not self._started:
            head = text.lstrip(WS)
            if any(trigger.startswith(head) for trigger in self.syntax.start_triggers):
                return len(text)
        longest = 0
        for trigger in self.syntax.triggers:
            for size in range(min(len(text), len(trigger) - 1), longest, -1):
                if text.endswith(trigger[:size]):
                    longest = size
                    break
        return longest

    def _emit(self, text: str, out: list[ChatDelta]) -> None:
        if self._after_calls:
            text = text.lstrip(WS)
        if not text:
            return
        self._after_calls = False
        self._started = self._started or bool(text.strip(WS))
        out.append(ContentDelta(text, self.index))

    # Inside a section: read calls until something else comes.

    def _read_section(self, final: bool, out: list[ChatDelta]) -> bool:
        section = self._section
        assert section is not None
        syntax = self.syntax
        c = Cursor(self._text, section.pos, final=final, memo=self._scans)
        try:
            while True:
                c.skip(WS + syntax.separators)
                if c.at_end():
                    if not final:
                        raise NeedMore  # more calls may follow
                    break
                closer = c.which(syntax.closers) if syntax.closers else None
                if closer is not None:
                    section.pos = c.pos + len(closer)
                    break
                if c.which(syntax.call_starts) is None:
                    break
                for call in syntax.read(c, self._schemas):
                    out.append(self._delta(call))
                    section.calls += 1
                section.pos = c.pos
        except NeedMore:
            return False
        except NotACall:
            if self._cut:  # the call the answer was cut in: dropped, with what follows
                self._section = None
                self._scans.clear()
                self._text = ""
                return False
        self._close_section(out)
        return True

    def _close_section(self, out: list[ChatDelta]) -> None:
        section = self._section
        assert section is not None
        self._section = None
        self._scans.clear()  # offsets into the text change from here
        if section.calls == 0:
            # Not a call after all: the trigger is text, and scanning resumes right after it.
            end = section.trigger_at + len(section.trigger)
            self._emit(self._text[:end], out)
            self._text = self._text[end:]
            self._started = True
            return
        self._text = self._text[section.pos :]
        self._started = self._after_calls = True

    def _delta(self, call: ParsedCall) -> ToolCallDelta:
        arguments = json.dumps(call.arguments, ensure_ascii=False)
        delta = ToolCallDelta(self._calls, self._new_id(), call.name, arguments, self.index)
        self._calls += 1
        return delta


def parse_tool_calls(
    text: str,
    format: ToolCallFormat | str,
    *,
    tools: Iterable[Mapping[str, Any]] | None = None,
    id_factory: Callable[[], str] | None = None,
) -> tuple[str, list[ToolCall]]:
    """(content, calls) of a complete answer; the same rules as the streaming parser.

    `tools` (OpenAI tool definitions) let XML-style formats type their bare-text values.
    """
    parser = ToolCallParser(format, id_factory=id_factory, tools=tools)
    events = parser.push(ContentDelta(text)) + parser.finish()
    content = "".join(e.text for e in events if isinstance(e, ContentDelta))
    calls = [ToolCall(e.id, e.name, e.arguments) for e in events if isinstance(e, ToolCallDelta)]
    return content, calls


def chosen_tools(specs: Sequence[ToolSpec], tool_choice: Any) -> list[ToolSpec] | None:
    """The tools a call must be made to, or None when calling is optional."""
    if tool_choice is None or tool_choice in ("auto", "none"):
        return None
    if not specs:
        raise InvalidRequestError("tool_choice requires tools")
    if tool_choice == "required" or tool_choice == "any":
        return list(specs)
    name = tool_choice
    if isinstance(tool_choice, Mapping):
        function = tool_choice.get("function", tool_choice)
        name = function.get("name") if isinstance(function, Mapping) else None
    if not isinstance(name, str):
        raise InvalidRequestError(f"invalid tool_choice: {tool_choice!r}")
    chosen = [spec for spec in specs if spec.name == name]
    if not chosen:
        raise InvalidRequestError(f"tool_choice names an unknown tool: {name!r}")
    return chosen[:1]


def tool_call_grammar(
    format: ToolCallFormat | str,
    tools: Iterable[Mapping[str, Any]] | None,
    tool_choice: Any = "required",
    *,
    parallel: bool = False,
    reasoning: ThinkingMarkers | None = None,
    reasoning_open: bool = False,
) -> str | None:
    """A GBNF grammar that lets the model write only tool calls, in its own format, with
    arguments valid for each tool's schema; None when `tool_choice` leaves calling optional
    ("auto", "none", None).

    `tool_choice` is "required" (any tool) or a named function ({"type": "function",
    "function": {"name": ...}}). With `parallel`, one or more calls (where the family can
    write several).

    Reasoning models keep their thinking: pass their `reasoning` markers (and
    `reasoning_open` when the prompt already opened the block). The engine samples the
    reasoning itself without the grammar (see `GenerationRequest.reasoning`), so the grammar
    only lets the model open the block first and, once it is closed, write the calls.
    """
    chosen = chosen_tools(tool_specs(tools), tool_choice)
    if chosen is None:
        return None
    syntax = SYNTAXES[ToolCallFormat(format)]
    g = GrammarBuilder()
    body = syntax.grammar(g, chosen, parallel and syntax.parallel)
    return g.render(after_reasoning(body, reasoning, reasoning_open, syntax.after_reasoning))


def after_reasoning(
    body: str, reasoning: ThinkingMarkers | None, reasoning_open: bool, glue_text: str = ""
) -> str:
    """`body` as what follows a reasoning model's thinking block: the grammar lets the model
    open the block first (unless the prompt did); the engine samples the inside grammar-free,
    so what follows the block is all the grammar sees of it."""
    if reasoning is None:
        return body
    glue = literal(glue_text) if glue_text else "[ \\t\\r\\n]*"
    if reasoning_open:
        return f"{glue} {body}"
    return f"( {literal(reasoning.start)} {glue} )? {body}"
