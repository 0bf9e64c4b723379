"""A read position in streamed text that knows the difference between "not yet" and "never".

Tool-call readers run on text that is still arriving. Every check therefore has three outcomes:
it matched, it can never match (`NotACall`: the text is plain content after all), or the text
ends too early to tell (`NeedMore`). Once the output is final, "too early" becomes "never".
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


class NeedMore(Exception):
    """The text so far is a valid beginning; wait for more before deciding."""


class NotACall(Exception):
    """The text cannot be a tool call in this format: treat it as content."""


# Outside strings: a quote, a bracket, or a run of anything else (numbers, literals, commas).
_JSON_TOKEN = re.compile(r'"|[{}\[\]]|[^"{}\[\]]+')
# Inside a string: everything up to its closing quote (an escape cut at the end stays out).
_STRING_BODY = re.compile(r'[^"\\]*(?:\\.[^"\\]*)*', re.S)
# Outside strings JSON only has punctuation, numbers and the letters of true/false/null.
_JSON_FILLER = re.compile(r"[\s,:0-9.+\-eEtrufalsn]*")
_PAIRS = {"}": "{", "]": "["}
WS = " \t\r\n"


@dataclass
class JsonScan:
    """How far `json_end` got in a growing text: resumed instead of restarted, so streaming a
    long argument costs time linear in its length."""

    pos: int
    stack: list[str] = field(default_factory=list)
    in_string: bool = False
    end: int | None = None


# Progress of scans over a text that only grows, keyed by what was scanned from where.
Memo = dict[tuple[Any, ...], Any]


def json_end(text: str, start: int, memo: Memo | None = None) -> int | None:
    """End of the JSON object or array starting at `start`; None while it is incomplete.

    Only the structure is checked here (regex-driven); `json.loads` validates the finished
    slice. Raises NotACall on impossible text. With `memo` (for a text that only grows) the
    scan picks up where the last call stopped.
    """
    scan = memo.get(("json", start)) if memo is not None else None
    if scan is None:
        if start >= len(text):
            return None
        if text[start] not in "{[":
            raise NotACall
        scan = JsonScan(start)
        if memo is not None:
            memo[("json", start)] = scan
    while scan.end is None and scan.pos < len(text):
        if scan.in_string:
            body = _STRING_BODY.match(text, scan.pos)
            assert body is not None  # the pattern accepts the empty string
            body_end = scan.pos = body.end()
            if body_end >= len(text) or text[body_end] != '"':
                break  # still inside (possibly cut in an escape)
            scan.pos += 1
            scan.in_string = False
            continue
        match = _JSON_TOKEN.match(text, scan.pos)
        assert match is not None  # the pattern accepts any character
        token = match.group()
        if token == '"':
            scan.in_string = True
        elif token in "{[":
            scan.stack.append(token)
        elif token in "}]":
            if not scan.stack or scan.stack.pop() != _PAIRS[token]:
                raise NotACall
            if not scan.stack:
                scan.end = match.end()
        elif not _JSON_FILLER.fullmatch(token):
            raise NotACall
        scan.pos = match.end()  # a run of filler cut at the end still scans fine in two parts
    return scan.end


class Cursor:
    """Reads `text` from `pos`; methods consume on success and raise NeedMore / NotACall."""

    def __init__(
        self,
        text: str,
        pos: int = 0,
        *,
        final: bool = False,
        memo: Memo | None = None,
    ) -> None:
        self.text = text
        self.pos = pos
        self.final = final
        self.memo = memo  # scans of this text, which may only grow while the memo is kept

    def _more(self) -> None:
        """The text ran out: wait, unless it is all there is."""
        raise NotACall if self.final else NeedMore

    @property
    def rest(self) -> str:
        return self.text[self.pos :]

    def at_end(self) -> bool:
        return self.pos >= len(self.text)

    def skip(self, chars: str = WS) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in chars:
            self.pos += 1

    def startswith(self, prefix: str) -> bool:
        """Whether the text continues with `prefix` (NeedMore while it could still)."""
        rest = self.text[self.pos : self.pos + len(prefix)]
        if rest == prefix:
            return True
        if prefix.startswith(rest) and not self.final:
            raise NeedMore
        return False

    def which(self, options: Iterable[str]) -> str | None:
        """The option the text continues with (the longest wins), or None once none can."""
        for option in sorted(options, key=len, reverse=True):
            if self.startswith(option):
                return option
        return None

    def optional(self, literal: str) -> bool:
        """Consume `literal` if it comes next."""
        if self.startswith(literal):
            self.pos += len(literal)
            return True
        return False

    def expect(self, literal: str) -> None:
        if not self.optional(literal):
            raise NotACall

    def closing(self, literal: str) -> None:
        """A closing marker that models sometimes leave out at the very end of their output."""
        self.skip()
        if self.final and self.at_end():
            return
        self.expect(literal)

    def until(self, *stops: str, limit: int | None = None) -> tuple[str, str]:
        """Text up to the earliest of `stops`, and that stop (consumed); with `limit`, a stop
        must come within that many characters."""
        key = ("until", self.pos, stops)
        origin = self.memo.get(key, self.pos) if self.memo is not None else self.pos
        horizon = len(self.text) if limit is None else self.pos + limit  # latest start allowed
        at, stop = -1, ""
        for option in stops:  # each search ends where the best match so far starts
            found = self.text.find(option, origin, horizon + len(option))
            if found >= 0:
                at, stop, horizon = found, option, found - 1
        if at < 0:
            if self.memo is not None:  # next time, search only what is new (and a stop's worth)
                self.memo[key] = max(self.pos, len(self.text) - max(map(len, stops)) + 1)
            if limit is not None and len(self.text) - self.pos > limit + max(map(len, stops)):
                raise NotACall
            self._more()
        body = self.text[self.pos : at]
        self.pos = at + len(stop)
        return body, stop

    def pattern(self, regex: re.Pattern[str]) -> str:
        """A run matching `regex` (which must accept every prefix of a run, e.g. `[\\w.]+`)."""
        match = regex.match(self.text, self.pos)
        if match is None or not match.group():
            if self.at_end():
                self._more()
            raise NotACall
        if match.end() >= len(self.text) and not self.final:
            raise NeedMore  # the run may go on
        self.pos = match.end()
        return match.group()

    def json(self) -> Any:
        """A JSON object or array."""
        self.skip()
        end = json_end(self.text, self.pos, self.memo)
        if end is None:
            self._more()
            raise AssertionError  # unreachable: _more always raises
        try:
            value = json.loads(self.text[self.pos : end], strict=False)
        except ValueError as exc:
            raise NotACall from exc
        self.pos = end
        return value
