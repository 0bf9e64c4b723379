"""Server events of the Realtime API, shaped as openai-python's `types/realtime/` models."""

from __future__ import annotations

import secrets
from typing import Any

from llamactl import ProtocolError


def new_id(prefix: str) -> str:
    return prefix + secrets.token_urlsafe(16).replace("-", "a").replace("_", "b")[:22]


def event(type_: str, **fields: Any) -> dict[str, Any]:
    return {"type": type_, "event_id": new_id("event_"), **fields}


def error_event(exc: ProtocolError, event_id: str | None = None) -> dict[str, Any]:
    """The Realtime API's `error` server event for a refused client event (`event_id`)."""
    return event(
        "error",
        error={
            "type": exc.type,
            "code": exc.code,
            "message": exc.message,
            "param": exc.param,
            "event_id": event_id,
        },
    )
