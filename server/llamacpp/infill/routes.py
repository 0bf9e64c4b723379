"""`POST /infill`: llama-server's native completion shape, streamed or not."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from ...common import ping_interval, server_state
from ...prepare import PreparedBodyRoute, off_loop
from ..completion import serving as completion
from . import serving
from .protocol import InfillRequest

__all__ = ["router"]

router = APIRouter(tags=["completions"], route_class=PreparedBodyRoute)


@router.post(
    "/infill",
    summary="Fill in the middle of code (llama-server; the model needs FIM tokens)",
    response_class=JSONResponse,
)
async def infill(body: InfillRequest, request: Request) -> Response:
    state = server_state(request)
    job = await off_loop(serving.start, state, body, abandon=lambda job: job.cancel())
    return await completion.respond(job, request, ping_interval(state, body.sse_ping_interval))
