"""Streaming detokenization that never splits a UTF-8 character.

A token may end in the middle of a multi-byte character (emoji, CJK); its bytes are held
until the character is complete, so every emitted delta is valid text.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable


class IncrementalDetokenizer:
    def __init__(self, token_bytes: Callable[[int], bytes]) -> None:
        self._token_bytes = token_bytes
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token: int) -> str:
        """Text completed by this token (possibly empty while a character is incomplete)."""
        return self._decoder.decode(self._token_bytes(token))

    def flush(self) -> str:
        """At the end of generation, an incomplete character (cut by max_tokens) is dropped:
        it was never text, and a U+FFFD would corrupt the answer's last word."""
        self._decoder.reset()
        return ""
