"""What one embeddings or rerank request may ask for: inputs, and tokens in all.

Each input is its own decode (rerank pairs share one where they fit), so a request's work grows
with both counts; without a bound, 14 KB of short inputs held the embedding worker for minutes
and every other embeddings request behind it. A request over a limit is a 400 naming the field,
the limit and its flag, as the other request limits are (server/limits.py, docs/serve.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llamactl.config import Settings

from .limits import over_limit

__all__ = ["EmbeddingLimits", "count_inputs"]


@dataclass(frozen=True)
class EmbeddingLimits:
    inputs: int
    tokens: int

    @classmethod
    def from_settings(cls, settings: Settings) -> EmbeddingLimits:
        return cls(inputs=settings.max_embedding_inputs, tokens=settings.max_embedding_tokens)

    def check_inputs(self, count: int, field: str, noun: str = "inputs") -> None:
        if count > self.inputs:
            raise over_limit(field, f"{count} {noun}", self.inputs, "max_embedding_inputs")

    def check_tokens(self, count: int, field: str, *, at_least: bool = False) -> None:
        """`count` tokens so far; `at_least` when the count stopped early (the rest was not
        tokenized once the limit was passed)."""
        if count > self.tokens:
            got = f"{'at least ' if at_least else ''}{count} tokens"
            raise over_limit(field, got, self.tokens, "max_embedding_tokens")


def count_inputs(raw: Any) -> int:
    """How many inputs an embeddings `input` / `content` holds, before tokenizing it: a list
    holding any token id is one input (ids, or texts and ids mixed), as `prompts_of` reads it."""
    if isinstance(raw, list) and not any(isinstance(p, int) for p in raw):
        return len(raw)
    return 1
