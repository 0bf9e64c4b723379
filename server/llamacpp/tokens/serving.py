"""Tokens in and out of the loaded model's vocabulary (run in a preparation worker)."""

from __future__ import annotations

from typing import Any

from llamactl import Model

from ...errors import bad_request
from .protocol import TokenPiece

__all__ = ["detokenize", "pieces", "prompts_of", "tokenize"]


def tokenize(
    model: Model,
    content: str | list[str | int],
    *,
    add_special: bool,
    parse_special: bool,
    field: str = "content",
) -> list[int]:
    """A text, or texts and ids mixed: only a text first in the list gets `add_special`; an
    id outside the vocabulary is a 400 naming `field.i`."""
    if isinstance(content, str):
        return model.tokenize(content, add_special=add_special, parse_special=parse_special)
    tokens: list[int] = []
    for i, part in enumerate(content):
        if isinstance(part, str):
            first = add_special and i == 0
            tokens += model.tokenize(part, add_special=first, parse_special=parse_special)
        else:
            tokens.append(_checked(model, part, f"{field}.{i}"))
    return tokens


def pieces(model: Model, tokens: list[int]) -> list[TokenPiece]:
    """Each token with its text; bytes that are not UTF-8 alone (half a character) as a list."""
    out = []
    for token in tokens:
        raw = model.token_bytes(token, special=True)
        try:
            piece: str | list[int] = raw.decode("utf-8")
        except UnicodeDecodeError:
            piece = list(raw)
        out.append(TokenPiece(id=token, piece=piece))
    return out


def detokenize(model: Model, tokens: list[int]) -> str:
    for i, token in enumerate(tokens):
        _checked(model, token, f"tokens.{i}")
    return model.detokenize(tokens, special=True)


def _checked(model: Model, token: int, field: str) -> int:
    n_vocab = model.n_vocab
    if not 0 <= token < n_vocab:
        raise bad_request(
            f"Field '{field}': token id {token} is not in the vocabulary (0 to {n_vocab - 1})"
        )
    return token


def prompts_of(model: Model, prompt: Any, field: str = "prompt") -> tuple[list[list[int]], bool]:
    """llama-server's prompt forms: a list holding any token id is one prompt (ids, or texts
    and ids mixed); a list of texts or token lists is one prompt each. (tokens, listed)."""
    if isinstance(prompt, str) or any(isinstance(p, int) for p in prompt):
        parts, listed = [prompt], False
    else:
        parts, listed = list(prompt), True
    if not parts:
        raise bad_request(f"Field '{field}': must not be empty")
    out = []
    for i, part in enumerate(parts):
        name = f"{field}.{i}" if listed else field
        tokens = tokenize(model, part, add_special=True, parse_special=True, field=name)
        if not tokens:
            raise bad_request(f"Field '{name}': must not be empty")
        out.append(tokens)
    return out, listed
