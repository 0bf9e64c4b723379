"""Telling a degenerate repetition from an answer: the loop guard of the interactive commands.

A small model at `-t 0` can fall into a cycle (`la France, la France, ...`) that only the
answer limit would end. The guard watches the text as it streams and says when its tail is
one short piece repeated back to back for long enough that no answer a person wants looks
like it. Repetition penalties make such cycles rarer; the guard ends the ones left.
"""

from __future__ import annotations

__all__ = ["REPEATING_NOTE", "RepetitionGuard"]

REPEATING_NOTE = "[stopped: repeating]"


class RepetitionGuard:
    """Feed it the streamed text; `repeating` turns true once the text ends in a piece of at
    most `max_period` characters repeated at least `min_repeats` times over at least
    `min_span` characters (a 200-character run of `-` or of `la France, ` counts, a
    Markdown table or a list of numbers does not)."""

    def __init__(self, *, max_period: int = 200, min_repeats: int = 4, min_span: int = 240):
        self.max_period, self.min_repeats, self.min_span = max_period, min_repeats, min_span
        self._window = max_period * min_repeats + min_span
        self._text = ""
        self.repeating = False

    @classmethod
    def for_speech(cls) -> RepetitionGuard:
        """Tighter, for answers that are spoken: a loop is heard (or, for emoji, an answer
        falls silent) long before 240 characters of it."""
        return cls(max_period=80, min_repeats=3, min_span=48)

    def feed(self, text: str) -> bool:
        """Add streamed text; True once the answer is looping (and from then on)."""
        if self.repeating or not text:
            return self.repeating
        self._text = (self._text + text)[-self._window :]
        self.repeating = self._tail_repeats()
        return self.repeating

    def _tail_repeats(self) -> bool:
        s = self._text
        n = len(s)
        for period in range(1, min(self.max_period, n // self.min_repeats) + 1):
            need = max(self.min_repeats * period, self.min_span)
            if need > n or s[n - 1 - period] != s[n - 1]:
                continue
            unit = s[n - period :]
            # the last `need` characters are `unit` repeated (the first copy may be partial)
            run = s[n - need :]
            if run == (unit * (need // period + 1))[-need:]:
                return True
        return False
