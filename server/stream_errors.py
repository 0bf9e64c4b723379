"""The error event that ends a stream, one builder per API family.

After the status line is sent, an error can only travel inside the stream, in the shape its
API's clients read: OpenAI chat and completions `data: {"error": …}`, Anthropic's `error`
event, the Responses API's `error` event (the Realtime API's lives in realtime/events.py).
The router, which only relays bytes, uses the same builders when a model dies mid-answer.
"""

from __future__ import annotations

from typing import Any

from .errors import api_error_of, error_body, is_anthropic_path
from .sse import data_frame, event_frame

ANTHROPIC_PATH = "/v1/messages"


def openai_error_frame(exc: BaseException) -> str:
    """`data: {"error": {"code", "message", "type"}}`, then the stream ends (no `[DONE]`)."""
    err = api_error_of(exc)
    body = {"code": err.status, "message": err.message, "type": err.type, **err.details()}
    return data_frame({"error": body})


def anthropic_error_frame(exc: BaseException) -> str:
    """`event: error` with Anthropic's error body."""
    err = api_error_of(exc)
    return event_frame("error", error_body(ANTHROPIC_PATH, err.status, err.message, err.type))


def responses_error(exc: BaseException) -> dict[str, Any]:
    """The `error` of a failed response (`code`, `message`), as the Responses API reports it."""
    return {"code": "server_error", "message": str(exc) or type(exc).__name__}


def responses_error_event(exc: BaseException) -> dict[str, Any]:
    """The Responses API's `error` event (the caller numbers it and adds `response.failed`)."""
    return {"type": "error", **responses_error(exc), "param": None}


def stream_error_frame(path: str, exc: BaseException) -> str:
    """The error event of whichever API `path` belongs to."""
    if is_anthropic_path(path):
        return anthropic_error_frame(exc)
    if path.startswith(("/v1/responses", "/responses")):
        return event_frame("error", responses_error_event(exc))
    return openai_error_frame(exc)


__all__ = [
    "anthropic_error_frame",
    "openai_error_frame",
    "responses_error",
    "responses_error_event",
    "stream_error_frame",
]
