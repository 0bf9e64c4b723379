"""`POST /v1/rerank` and its aliases (`/rerank`, `/reranking`, `/v1/reranking`), with --rerank."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from ...common import server_state
from ...prepare import PreparedBodyRoute
from . import serving
from .protocol import RerankRequest

__all__ = ["router"]

router = APIRouter(tags=["rerank"], route_class=PreparedBodyRoute)


@router.post(
    "/v1/rerank",
    summary="Rank documents by relevance to a query (llama-server; needs --rerank)",
)
@router.post("/rerank", include_in_schema=False)
@router.post("/reranking", include_in_schema=False)
@router.post("/v1/reranking", include_in_schema=False)
async def rerank(body: RerankRequest, request: Request) -> Any:
    return await serving.rerank(server_state(request), body, request)
