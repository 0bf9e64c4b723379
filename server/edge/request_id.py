"""Request ids: the client's `X-Request-Id` when it is safe to print, else a fresh one.

The id goes into every log line of the request, so a crafted one (newlines, control
characters, megabytes) could forge or flood log lines: only up to 128 characters of
letters, digits and `-_.:/+=@` are kept as given.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from ..request_log import request_id_var
from .asgi import ASGIApp, Receive, Scope, Send, header

__all__ = ["MAX_REQUEST_ID", "RequestIdMiddleware", "request_id_for"]

MAX_REQUEST_ID = 128
_SAFE = re.compile(rf"[A-Za-z0-9._:/+=@-]{{1,{MAX_REQUEST_ID}}}")


def request_id_for(scope: Scope) -> str:
    given = header(scope, b"x-request-id")
    return given if _SAFE.fullmatch(given) else uuid.uuid4().hex


class RequestIdMiddleware:
    """Outermost layer: the id is set before anything can refuse, so refusals carry it too."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        request_id = request_id_for(scope)
        scope.setdefault("state", {})["request_id"] = request_id
        request_id_var.set(request_id)
        encoded = request_id.encode()

        async def send_with_id(message: dict[str, Any]) -> None:
            if message["type"] in ("http.response.start", "websocket.http.response.start"):
                headers = [
                    (k, v) for k, v in message.get("headers", ()) if k.lower() != b"x-request-id"
                ]
                headers.append((b"x-request-id", encoded))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_id)
