"""`POST /v1/messages` and `POST /v1/messages/count_tokens` (also without `/v1`)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from ...common import check_model, ping_interval, render_chat, server_state, start_chat
from ...prepare import PreparedBodyRoute, off_loop
from ...sse import sse_response
from .protocol import CountTokensRequest, CountTokensResponse, Message, MessagesRequest
from .serving import (
    PING_EVENT,
    chat_request,
    message_unless_disconnected,
    prompt_request,
    reply_for,
    stream_frames,
)

router = APIRouter(tags=["anthropic"], route_class=PreparedBodyRoute)

_STREAM_DOC: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The message, or with `stream: true` Anthropic's server-sent events",
        "content": {"text/event-stream": {}},
    }
}


@router.post("/v1/messages", response_model=Message, responses=_STREAM_DOC)
@router.post("/messages", response_model=Message, include_in_schema=False)
async def create_message(body: MessagesRequest, request: Request) -> Message | StreamingResponse:
    """Anthropic Messages over the local model; thinking blocks carry its reasoning."""
    state = server_state(request)
    check_model(state, body.model)
    interval = ping_interval(state, body.sse_ping_interval)
    stream = await off_loop(_start, state, body, abandon=lambda stream: stream.cancel())
    reply = reply_for(state, body, stream)
    state.register(reply.id, stream)  # lets the reasoning control endpoint find it by id

    def release() -> None:
        stream.cancel()
        state.unregister(reply.id, stream)

    if body.stream:
        frames = stream_frames(stream, reply)
        return sse_response(frames, ping_interval=interval, ping=PING_EVENT, on_close=release)
    try:
        return await message_unless_disconnected(stream, reply, request)
    finally:
        release()


def _start(state, body: MessagesRequest):
    """Render, tokenise and submit (in a preparation worker)."""
    return start_chat(state, chat_request(state, body))


@router.post("/v1/messages/count_tokens", response_model=CountTokensResponse)
@router.post("/messages/count_tokens", response_model=CountTokensResponse, include_in_schema=False)
async def count_tokens(body: CountTokensRequest, request: Request) -> CountTokensResponse:
    """Tokens of the prompt the model would see: template, system, tools and history."""
    state = server_state(request)
    check_model(state, body.model)
    rendered = await off_loop(lambda: render_chat(state, prompt_request(body)))
    return CountTokensResponse(input_tokens=len(rendered.tokens))
