"""Route of the OpenAI text completions API: thin, the work is in `serving.py`."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from ...common import ping_interval, server_state
from ...prepare import PreparedBodyRoute, off_loop
from ...schema import inline_schema
from ...sse import sse_response
from . import serving
from .protocol import CompletionRequest, TextCompletion

router = APIRouter(tags=["openai"], route_class=PreparedBodyRoute)

_STREAM_DOC: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "A `text_completion`, or with `stream: true` server-sent events: "
        "`data: <text_completion>` chunks, `:` pings while idle, then `data: [DONE]`",
        "content": {
            "text/event-stream": {"schema": inline_schema(TextCompletion, mode="serialization")}
        },
    }
}


@router.post(
    "/v1/completions",
    response_model=TextCompletion,
    responses=_STREAM_DOC,
    summary="Create a text completion (no chat template)",
)
async def completions(body: CompletionRequest, request: Request) -> Response:
    state = server_state(request)
    pings = ping_interval(state, body.sse_ping_interval)
    job = await off_loop(serving.start, state, body, abandon=lambda job: job.cancel())
    if body.stream:
        return sse_response(serving.stream_frames(job), ping_interval=pings, on_close=job.cancel)
    return JSONResponse(await serving.complete(job, request))
