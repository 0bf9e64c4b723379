"""Tokenising long templated prompts in pieces, with exactly the tokens of one call.

llama.cpp finds special tokens (`<|im_start|>`...) in a text by searching, for every special
token, every plain-text fragment from the fragment's start to the end of the whole text. On a
chat of 20,000 messages that is quadratic: 5-8 s to tokenise what takes 0.2 s as plain text.

Special tokens split the text into fragments that llama.cpp tokenises independently, so
cutting the text just before a special token and tokenising the pieces one by one gives the
same tokens, provided llama.cpp would have split there too. That holds for a control token
that strips no whitespace before it (no LSTRIP attribute) and that no other special token can
overlap (contain it, or share a suffix/prefix with it). Each piece starts with such a token, so
the tokenizer's state after it (e.g. SentencePiece's space prefix) is the same as in one call.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import llama_cpp

__all__ = ["CHUNK_CHARS", "SpecialCuts"]

# Pieces of about this many characters: short enough that the search inside a piece is cheap.
CHUNK_CHARS = 4096

_SPECIAL = (
    llama_cpp.LLAMA_TOKEN_ATTR_CONTROL
    | llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED
    | llama_cpp.LLAMA_TOKEN_ATTR_UNKNOWN
)


class SpecialCuts:
    """Where a text may be cut before tokenising: before the safe special tokens."""

    def __init__(self, special_texts: dict[str, bool]) -> None:
        """`special_texts`: text of every special token -> whether it may start a piece
        (a control token without LSTRIP); the overlap rules are applied here."""
        safe = [t for t, may_cut in special_texts.items() if may_cut and t]
        texts = [t for t in special_texts if t]
        suffixes = {t[i:] for t in texts for i in range(1, len(t))}
        prefixes = {t[:i] for t in texts for i in range(1, len(t))}
        joined = "\0".join(texts)

        def overlaps(s: str) -> bool:
            if joined.count(s) > 1:  # inside another special token
                return True
            if any(s[:i] in suffixes for i in range(1, len(s))):
                return True
            return any(s[i:] in prefixes for i in range(1, len(s)))

        self.cut_before = sorted((t for t in safe if not overlaps(t)), key=len, reverse=True)
        self._pattern = (
            re.compile("|".join(re.escape(t) for t in self.cut_before)) if self.cut_before else None
        )

    @classmethod
    def of_vocab(cls, vocab: llama_cpp.llama_vocab_p) -> SpecialCuts:
        """From the vocabulary's token attributes and raw texts (what llama.cpp matches)."""
        texts: dict[str, bool] = {}
        for token in range(llama_cpp.llama_vocab_n_tokens(vocab)):
            attr = llama_cpp.llama_vocab_get_attr(vocab, token)
            if not attr & _SPECIAL:
                continue
            text = (llama_cpp.llama_vocab_get_text(vocab, token) or b"").decode("utf-8", "replace")
            may_cut = bool(attr & llama_cpp.LLAMA_TOKEN_ATTR_CONTROL) and not (
                attr & llama_cpp.LLAMA_TOKEN_ATTR_LSTRIP
            )
            texts[text] = texts.get(text, True) and may_cut
        return cls(texts)

    def pieces(self, text: str, size: int = CHUNK_CHARS) -> Iterator[str]:
        """`text` in pieces of about `size` characters, each after the first starting with a
        safe special token; one piece when there is nowhere to cut."""
        if self._pattern is None or len(text) <= size:
            yield text
            return
        start = 0
        while len(text) - start > size:
            match = self._pattern.search(text, start + size)
            if match is None:
                break
            yield text[start : match.start()]
            start = match.start()
        yield text[start:]
