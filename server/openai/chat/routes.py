"""Routes of the OpenAI chat API: thin, the work is in `serving.py`."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from ...common import ping_interval, server_state
from ...prepare import PreparedBodyRoute, off_loop
from ...schema import inline_schema
from ...sse import sse_response
from . import serving
from .protocol import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ControlRequest,
    ControlResponse,
)

router = APIRouter(tags=["openai"], route_class=PreparedBodyRoute)

_STREAM_DOC: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "A `chat.completion`, or with `stream: true` server-sent events: "
        "`data: <chat.completion.chunk>` events, `:` pings while idle, then `data: [DONE]`",
        "content": {
            "text/event-stream": {
                "schema": inline_schema(ChatCompletionChunk, mode="serialization"),
            }
        },
    }
}


@router.post(
    "/v1/chat/completions",
    response_model=ChatCompletion,
    responses=_STREAM_DOC,
    summary="Create a chat completion",
)
@router.post("/chat/completions", include_in_schema=False)
async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
    state = server_state(request)
    pings = ping_interval(state, body.sse_ping_interval)
    job = await off_loop(serving.start, state, body, abandon=lambda job: serving.finish(state, job))
    if body.stream:
        return sse_response(
            serving.stream_frames(state, job), ping_interval=pings, on_close=job.stream.cancel
        )
    return JSONResponse(await serving.complete(state, job, request))


@router.post(
    "/v1/chat/completions/control",
    response_model=ControlResponse,
    response_model_exclude_none=True,
    summary="End the reasoning of a running chat completion (llama-server extension)",
)
@router.post("/chat/completions/control", include_in_schema=False)
async def chat_control(request: Request, body: ControlRequest | None = None) -> JSONResponse:
    state = server_state(request)
    body = body or ControlRequest()
    return JSONResponse(serving.control(state, body.id, body.action))
