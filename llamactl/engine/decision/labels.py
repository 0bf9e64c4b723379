"""Label codes: the short strings a decoder decision model answers with, one per option, and the
token ids whose logits score each option.

- `letters` (openjev, h2o-lightning): A-Z then a-z.
- `letters_doubled` (lev, nimble, pplx-decider): A-Z then AA, AB, ... ZZ, leaving out the
  codes that are not one token (as llama-server does), at most 255.
- `d1` (lfm2-d1): single-letter keys as they are, else A.. (up to 26 options) or 00, 01, ...;
  a code that is not one token, or is taken, gives way to the first free code of a pool; each
  option scores the max over its group (the code, and the code after a space).
"""

from __future__ import annotations

import string
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from .types import Option, QuestionType

UPPER = string.ascii_uppercase
LOWER = string.ascii_lowercase
NOUL_WORDS = {"true": ("yes", "Yes", "YES"), "false": ("no", "No", "NO")}

SingleToken = Callable[[str], "int | None"]


def letters() -> list[str]:
    return [*UPPER, *LOWER]


def letters_doubled() -> list[str]:
    return [*UPPER, *(a + b for a in UPPER for b in UPPER)]


def d1_pool() -> Iterator[str]:
    """A-Z, 00-99, a-z, #0-#199, AA-ZZ: the codes d1 falls back to."""
    yield from UPPER
    yield from (f"{i:02d}" for i in range(100))
    yield from LOWER
    yield from (f"#{i}" for i in range(200))
    yield from (a + b for a in UPPER for b in UPPER)


@dataclass(frozen=True)
class Labels:
    """The codes shown in the prompt and the token ids read for each option."""

    codes: tuple[str | None, ...]
    groups: tuple[tuple[int, ...], ...]


class LabelMaker:
    """Label codes for one model's vocabulary (`single` gives a text's id when it is one token)."""

    def __init__(self, scheme: str, single: SingleToken, limit: int) -> None:
        self.scheme = scheme
        self._single = single
        self._cache: dict[str, int | None] = {}
        self.max_options = limit
        if scheme == "letters":
            # the template letters options by position: only a leading run is usable
            base = letters()[:limit]
            n = 0
            while n < len(base) and self.token(base[n]) is not None:
                n += 1
            self._plain = base[:n]
            self.max_options = n
        elif scheme == "letters_doubled":
            # the codes are passed as labels: a code that is not one token is skipped, as
            # llama-server does (so a vocabulary without `AB` still reads 255 options)
            self._plain = [c for c in letters_doubled() if self.token(c) is not None][:limit]
            self.max_options = len(self._plain)
        else:
            self._plain = letters_doubled()[:limit]
            if scheme == "d1":
                self.max_options = min(
                    limit, sum(1 for c in d1_pool() if self.token(c) is not None)
                )

    def token(self, text: str) -> int | None:
        if text not in self._cache:
            self._cache[text] = self._single(text)
        return self._cache[text]

    def positional(self, n: int) -> Labels:
        """The first `n` codes of the scheme, one token each."""
        codes = self._plain[:n]
        return Labels(tuple(codes), tuple((self.token(c),) for c in codes))  # type: ignore[misc]

    def for_options(self, qtype: QuestionType, options: Sequence[Option]) -> Labels:
        if self.scheme != "d1":
            return self.positional(len(options))
        if qtype == "noul":
            return Labels(
                tuple(None for _ in options),
                tuple(self._group(NOUL_WORDS[o.key]) for o in options),
            )
        if qtype == "score":
            codes = [o.key for o in options]
            return Labels(tuple(codes), tuple(self._group((c,)) for c in codes))
        codes = self._d1_codes([o.key for o in options])
        return Labels(tuple(codes), tuple(self._group((c,)) for c in codes))

    def _d1_codes(self, keys: list[str]) -> list[str]:
        if all(len(k) == 1 and k in UPPER + LOWER for k in keys):
            wanted = list(keys)
        elif len(keys) <= 26:
            wanted = list(UPPER[: len(keys)])
        else:
            wanted = [f"{i:02d}" for i in range(len(keys))]
        taken: set[str] = set()
        out = []
        pool = (c for c in d1_pool() if self.token(c) is not None)
        for code in wanted:
            if code in taken or self.token(code) is None:
                code = next(c for c in pool if c not in taken)
            taken.add(code)
            out.append(code)
        return out

    def _group(self, words: Sequence[str]) -> tuple[int, ...]:
        """Every single-token spelling of `words`, bare and after a space."""
        ids: list[int] = []
        for word in words:
            for text in (word, " " + word):
                tok = self.token(text)
                if tok is not None and tok not in ids:
                    ids.append(tok)
        return tuple(ids)
