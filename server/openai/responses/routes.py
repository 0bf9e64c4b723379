"""`/v1/responses` routes (also without the `/v1` prefix, as llama-server answers both)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from ...prepare import PreparedBodyRoute, off_loop
from . import serving
from .protocol import InputTokensRequest, ResponsesRequest

router = APIRouter(tags=["responses"], route_class=PreparedBodyRoute)


@router.post("/v1/responses")
@router.post("/responses", include_in_schema=False)
async def create_response(body: ResponsesRequest, request: Request) -> Any:
    """Generate a response: one JSON object, or typed SSE events with `stream: true`."""
    return await serving.create_response(request, body)


@router.post("/v1/responses/input_tokens")
@router.post("/responses/input_tokens", include_in_schema=False)
async def count_input_tokens(body: InputTokensRequest, request: Request) -> dict[str, Any]:
    """How many tokens the prompt of such a request would have, without generating."""
    return await off_loop(serving.count_input_tokens, request, body)


@router.get("/v1/responses/{response_id}")
@router.get("/responses/{response_id}", include_in_schema=False)
def get_response(response_id: str, request: Request) -> dict[str, Any]:
    """A stored response (kept in memory; see docs/api-responses.md)."""
    return serving.stored(request, response_id).response


@router.delete("/v1/responses/{response_id}")
@router.delete("/responses/{response_id}", include_in_schema=False)
def delete_response(response_id: str, request: Request) -> dict[str, Any]:
    return serving.delete_response(request, response_id)
