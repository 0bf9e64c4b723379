"""Semantic end of turn: how much silence ends a turn, given Smart Turn's P(finished).

The one table of OpenAI's `eagerness` levels. Smart Turn reads a turn once its speech has
been quiet for the level's short silence (`finished_ms`): a turn judged finished ends there;
one judged unfinished waits longer, the less likely it is finished the longer, up to the
level's maximum (OpenAI documents 8 s / 4 s / 2 s for low / medium / high; `auto` is
`medium`). More speech before that wait runs out keeps the turn open, and its next silence
gets a reading of its own. The silence is not read again meanwhile: Smart Turn is trained on
about 200 ms of trailing silence, and its readings with more are erratic (measured on eSpeak:
"Could you tell me" 0.14 at 200 ms, 0.90 at 500 ms). Lower eagerness also asks for more
confidence before ending early.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EAGERNESS", "SemanticTurn", "semantic_turn"]


@dataclass(frozen=True)
class SemanticTurn:
    """The semantic end-of-turn rule of one eagerness level."""

    eagerness: str
    finished_ms: int  # silence that ends a turn judged finished (Smart Turn reads it here)
    max_ms: int  # silence that ends any turn
    threshold: float  # P(finished) at or above which the turn is finished

    def silence_ms(self, p: float) -> int:
        """The silence that ends a turn whose reading gave P(finished) = `p`."""
        if p >= self.threshold:
            return self.finished_ms
        doubt = 1.0 - max(p, 0.0) / self.threshold
        return round(self.finished_ms + (self.max_ms - self.finished_ms) * doubt)


#               finished_ms  max_ms  threshold
_LEVELS: dict[str, tuple[int, int, float]] = {
    "low": (250, 8000, 0.7),
    "medium": (200, 4000, 0.5),
    "high": (150, 2000, 0.3),
}
_ALIASES = {"auto": "medium"}

EAGERNESS: tuple[str, ...] = (*_LEVELS, *_ALIASES)


def semantic_turn(eagerness: str = "auto") -> SemanticTurn:
    """The rule of `eagerness` (low / medium / high / auto); ValueError for another name."""
    level = _ALIASES.get(eagerness, eagerness)
    if level not in _LEVELS:
        raise ValueError(f"eagerness must be one of {', '.join(EAGERNESS)}, got {eagerness!r}")
    finished, longest, threshold = _LEVELS[level]
    return SemanticTurn(eagerness, finished, longest, threshold)
