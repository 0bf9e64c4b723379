"""ASGI types and the two helpers every edge layer needs: read a header, refuse a request.

The layers are plain ASGI (not Starlette's BaseHTTPMiddleware) so that a websocket handshake
is refused before the upgrade and streamed responses pass through untouched.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ..errors import error_body

__all__ = ["ASGIApp", "Receive", "Scope", "Send", "header", "refuse"]

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def header(scope: Scope, name: bytes) -> str:
    """The first value of header `name` (lower-case bytes), or "" when it is absent."""
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return value.decode("latin-1")
    return ""


async def refuse(
    scope: Scope,
    send: Send,
    status: int,
    message: str,
    type_: str,
    extra_headers: Sequence[tuple[bytes, bytes]] = (),
) -> None:
    """Answer with the API family's error body (chosen by path), HTTP or websocket alike."""
    body = json.dumps(error_body(scope["path"], status, message, type_)).encode()
    headers = [(b"content-type", b"application/json; charset=utf-8"), *extra_headers]
    if scope["type"] == "websocket":
        # Deny the handshake with an HTTP response (ASGI websocket denial extension), falling
        # back to a close before accept, which clients report as 403.
        if "websocket.http.response" in scope.get("extensions", {}):
            await send(
                {"type": "websocket.http.response.start", "status": status, "headers": headers}
            )
            await send({"type": "websocket.http.response.body", "body": body})
        else:
            await send({"type": "websocket.close", "code": 1008})
        return
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
