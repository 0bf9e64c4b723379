"""`POST /v1/embeddings`; a body with `content` instead of `input` gets the native shape, as
llama-server answers it."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from ...common import server_state
from ...errors import bad_request
from ...prepare import PreparedBodyRoute
from . import serving
from .protocol import EmbeddingsRequest

__all__ = ["router"]

router = APIRouter(tags=["embeddings"], route_class=PreparedBodyRoute)


@router.post("/v1/embeddings", summary="Embed texts (OpenAI; needs --embedding)")
async def embeddings(body: EmbeddingsRequest, request: Request) -> Any:
    state = server_state(request)
    embedder = state.require_embeddings()
    if body.input is not None and not embedder.pooled:
        raise bad_request(
            "Pooling type 'none' is not OAI compatible. Please use a different pooling type"
        )
    model = body.model or state.model_id

    def shape(embedded: serving.Embedded) -> Any:
        vectors, n_tokens, field = embedded
        if field == "content":
            return serving.native_shape(vectors)
        return serving.openai_shape(vectors, n_tokens, model, body.encoding_format)

    return await serving.answer(state, body, request, shape)
