"""Embedding requests: inputs → token lists → the embedding context → vectors, normalized
as asked, in OpenAI's shape or llama-server's native one.

A request is bounded (--max-embedding-inputs, --max-embedding-tokens: a 400 before any work is
queued), stops between inputs when its client hangs up, and its answer (up to tens of MB of
numbers) is rendered in a preparation worker, not on the event loop.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import numpy as np
from fastapi import Request
from fastapi.responses import JSONResponse
from starlette.responses import Response

from llamactl import normalize

from ...common import check_model
from ...disconnect import CLIENT_CLOSED_REQUEST, result_unless_disconnected
from ...embedding_limits import EmbeddingLimits, count_inputs
from ...errors import bad_request
from ...llamacpp.tokens.serving import prompts_of
from ...prepare import off_loop
from ...state import ServerState
from .protocol import EmbeddingsRequest

__all__ = ["answer", "embed", "native_shape", "openai_shape"]

Embedded = tuple[list[np.ndarray], int, str]  # (vectors, tokens read, the inputs' field)


def _inputs(state: ServerState, body: EmbeddingsRequest) -> tuple[list[list[int]], list[str], str]:
    """(token lists, each one's field name, the field they came from): `input`, else
    llama-server's `content`."""
    field = "input" if body.input is not None else "content"
    raw = body.input if body.input is not None else body.content
    if raw is None:
        raise bad_request('"input" or "content" must be provided')
    if body.dimensions is not None:
        raise bad_request("Field 'dimensions': not supported; the model's own size is used")
    limits = EmbeddingLimits.from_settings(state.settings)
    limits.check_inputs(count_inputs(raw), field)
    inputs, listed = prompts_of(state.require_text_model(), raw, field)
    limits.check_tokens(sum(len(t) for t in inputs), field)
    names = [f"{field}.{i}" if listed else field for i in range(len(inputs))]
    return inputs, names, field


async def embed(state: ServerState, body: EmbeddingsRequest, request: Request) -> Embedded | None:
    """(vectors — one per input, or per token without pooling —, tokens read, the field), or
    None when the client hung up before the last input was embedded (the rest is dropped)."""
    check_model(state, body.model)
    embedder = state.require_embeddings()
    inputs, names, field = await off_loop(_inputs, state, body)  # tokenizing takes a while
    vectors = await result_unless_disconnected(request, embedder.submit(inputs, names))
    if vectors is None:
        return None
    kind = state.settings.embd_normalize if body.embd_normalize is None else body.embd_normalize
    if embedder.pooled:
        vectors = [normalize(v, kind) for v in vectors]
    return vectors, sum(len(t) for t in inputs), field


async def answer(
    state: ServerState,
    body: EmbeddingsRequest,
    request: Request,
    shape: Callable[[Embedded], Any],
) -> Response:
    """The embeddings of `body` in the shape `shape` gives them, as a JSON response rendered
    off the event loop (a 499 for the access log when the client hung up)."""
    embedded = await embed(state, body, request)
    if embedded is None:
        return Response(status_code=CLIENT_CLOSED_REQUEST)
    return await off_loop(lambda: JSONResponse(shape(embedded)))


def _encoded(vector: np.ndarray, encoding: str) -> Any:
    if encoding == "base64":
        return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
    return vector.tolist()


def openai_shape(
    vectors: list[np.ndarray], n_tokens: int, model: str, encoding: str
) -> dict[str, Any]:
    data = [
        {"object": "embedding", "index": i, "embedding": _encoded(v, encoding)}
        | ({"encoding_format": "base64"} if encoding == "base64" else {})
        for i, v in enumerate(vectors)
    ]
    usage = {"prompt_tokens": n_tokens, "total_tokens": n_tokens}
    return {"object": "list", "model": model, "data": data, "usage": usage}


def native_shape(vectors: list[np.ndarray]) -> list[dict[str, Any]]:
    """llama-server's native answer: each input's vectors as a list (one when pooled)."""
    return [
        {"index": i, "embedding": v.tolist() if v.ndim == 2 else [v.tolist()]}
        for i, v in enumerate(vectors)
    ]
