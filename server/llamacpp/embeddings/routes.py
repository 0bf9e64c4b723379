"""`POST /embedding` and `POST /embeddings`: llama-server's native shape (a list of
`{"index", "embedding": [[...], ...]}`), per token when the pooling is `none`."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from ...common import server_state
from ...openai.embeddings import serving
from ...openai.embeddings.protocol import EmbeddingsRequest
from ...prepare import PreparedBodyRoute

__all__ = ["router"]

router = APIRouter(tags=["embeddings"], route_class=PreparedBodyRoute)


@router.post("/embedding", summary="Embed texts, llama-server's native shape (--embedding)")
@router.post("/embeddings", include_in_schema=False)
async def native_embeddings(body: EmbeddingsRequest, request: Request) -> Any:
    return await serving.answer(
        server_state(request), body, request, lambda embedded: serving.native_shape(embedded[0])
    )
