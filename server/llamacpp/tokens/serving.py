"""Tokens in and out of the loaded model's vocabulary (run in a preparation worker), and the
token routes' answers, built there too: a list of a million tokens is seconds of Python work
that, on the event loop, stalled every client (#31 row 11)."""

from __future__ import annotations

import functools
import json
from typing import Any

from starlette.responses import Response

from llamactl import Model

from ...errors import bad_request

__all__ = ["content_size", "detokenize", "json_answer", "pieces", "prompts_of", "tokenize"]

# Items encoded per json.dumps call: one call holds the GIL throughout (a million pieces, about
# a second); between calls the event loop's thread gets its turn.
_CHUNK = 4096

_dumps = functools.partial(json.dumps, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


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


def content_size(content: str | list[str | int]) -> int:
    """The UTF-8 bytes of the text(s) in `/tokenize`'s content (an id counts as one)."""
    if isinstance(content, str):
        return len(content.encode("utf-8", "surrogatepass"))
    return sum(
        len(part.encode("utf-8", "surrogatepass")) if isinstance(part, str) else 1
        for part in content
    )


def pieces(model: Model, tokens: list[int]) -> list[dict[str, Any]]:
    """Each token with its text (`TokenPiece`'s shape); bytes that are not UTF-8 alone (half a
    character) as a list."""
    out = []
    for token in tokens:
        raw = model.token_bytes(token, special=True)
        try:
            piece: str | list[int] = raw.decode("utf-8")
        except UnicodeDecodeError:
            piece = list(raw)
        out.append({"id": token, "piece": piece})
    return out


def json_answer(key: str, value: str | list[Any]) -> Response:
    """`{key: value}` as the JSON response; a list is encoded a chunk at a time (`_CHUNK`)."""
    if isinstance(value, str):
        body = "{" + _dumps(key) + ":" + _dumps(value) + "}"
    else:
        parts = [_dumps(value[i : i + _CHUNK])[1:-1] for i in range(0, len(value), _CHUNK)]
        body = "{" + _dumps(key) + ":[" + ",".join(parts) + "]}"
    return Response(body.encode(), media_type="application/json")


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
