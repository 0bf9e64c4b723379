"""Server events of the Realtime API, shaped as openai-python's `types/realtime/` models."""

from __future__ import annotations

import secrets
from typing import Any


def new_id(prefix: str) -> str:
    return prefix + secrets.token_urlsafe(16).replace("-", "a").replace("_", "b")[:22]


def event(type_: str, **fields: Any) -> dict[str, Any]:
    return {"type": type_, "event_id": new_id("event_"), **fields}


def error(
    message: str,
    *,
    type_: str = "invalid_request_error",
    code: str | None = None,
    param: str | None = None,
    event_id: str | None = None,
) -> dict[str, Any]:
    return event(
        "error",
        error={
            "type": type_,
            "code": code,
            "message": message,
            "param": param,
            "event_id": event_id,
        },
    )


MAX_MESSAGE = 1024  # messages quote client values; a long one is cut, never echoed whole


def _cut(text: str | None) -> str | None:
    if text is None or len(text) <= MAX_MESSAGE:
        return text
    return text[: MAX_MESSAGE - 3] + "..."


class ProtocolError(Exception):
    """A client event we refuse; becomes an `error` event and the socket stays open."""

    def __init__(
        self,
        message: str,
        *,
        code: str = "invalid_value",
        param: str | None = None,
        type_: str = "invalid_request_error",
    ) -> None:
        message = _cut(message) or ""
        super().__init__(message)
        self.message = message
        self.code = code
        self.param = _cut(param)
        self.type = type_

    def to_event(self, event_id: str | None) -> dict[str, Any]:
        return error(
            self.message, type_=self.type, code=self.code, param=self.param, event_id=event_id
        )
