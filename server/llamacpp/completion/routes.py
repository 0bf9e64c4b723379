"""`POST /completion` and `POST /completions`: llama-server's native shape (OpenAI's is at
`/v1/completions`)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from ...common import ping_interval, server_state
from ...prepare import PreparedBodyRoute, off_loop
from . import serving
from .protocol import NativeCompletionRequest

__all__ = ["router"]

router = APIRouter(tags=["completions"], route_class=PreparedBodyRoute)


@router.post(
    "/completion",
    summary="Complete a prompt, llama-server's native shape (no chat template)",
    response_class=JSONResponse,
)
@router.post("/completions", include_in_schema=False, response_class=JSONResponse)
async def completion(body: NativeCompletionRequest, request: Request) -> Response:
    state = server_state(request)
    job = await off_loop(serving.start, state, body, abandon=lambda job: job.cancel())
    return await serving.respond(job, request, ping_interval(state, body.sse_ping_interval))
