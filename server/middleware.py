"""ASGI middleware: request ids, the loading gate and API keys, for HTTP and websockets alike.

Written as plain ASGI (not Starlette's BaseHTTPMiddleware) so a websocket handshake is refused
with 401 before the upgrade, and streaming responses pass through untouched.
"""

from __future__ import annotations

import hmac
import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from .errors import error_body
from .request_log import request_id_var

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

log = logging.getLogger("llamactl.server")

PUBLIC_PATHS = frozenset({"/health", "/v1/health", "/"})


def _header(scope: Scope, name: bytes) -> str:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return value.decode("latin-1")
    return ""


def presented_key(scope: Scope) -> str:
    """llama-server's rule: `Authorization` (a leading "Bearer " stripped); only when that
    header is empty, `X-Api-Key`."""
    auth = _header(scope, b"authorization").strip()
    if auth:
        return auth[7:].strip() if auth[:7].lower() == "bearer " else auth
    return _header(scope, b"x-api-key").strip()


def key_matches(presented: str, keys: list[str]) -> bool:
    """Constant-time comparison against every configured key (no early exit)."""
    ok = False
    for key in keys:
        ok |= hmac.compare_digest(presented.encode(), key.encode())
    return ok


async def _refuse(
    scope: Scope, receive: Receive, send: Send, status: int, message: str, type_: str
) -> None:
    body = json.dumps(error_body(scope["path"], status, message, type_)).encode()
    if scope["type"] == "websocket":
        # Deny the handshake with an HTTP response (ASGI websocket denial extension), falling
        # back to a close before accept.
        if "websocket.http.response" in scope.get("extensions", {}):
            await send(
                {
                    "type": "websocket.http.response.start",
                    "status": status,
                    "headers": [(b"content-type", b"application/json; charset=utf-8")],
                }
            )
            await send({"type": "websocket.http.response.body", "body": body})
        else:
            await send({"type": "websocket.close", "code": 1008})
        return
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _json_by_default(scope: Scope) -> Scope:
    """Bodies sent without a JSON content type (`curl -d '{...}'` sends a form type) are read
    as JSON, as llama-server does; multipart uploads keep their type."""
    ctype = _header(scope, b"content-type").lower()
    if ctype.startswith(("application/json", "multipart/")) or "+json" in ctype:
        return scope
    headers = [(k, v) for k, v in scope.get("headers", ()) if k.lower() != b"content-type"]
    headers.append((b"content-type", b"application/json"))
    return {**scope, "headers": headers}


class GateMiddleware:
    """Request id, 503 while loading, API keys. `state` is the app's ServerState."""

    def __init__(self, app: ASGIApp, state: Any) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        request_id = _header(scope, b"x-request-id") or uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id
        request_id_var.set(request_id)
        path = scope["path"]

        async def send_with_id(message: dict[str, Any]) -> None:
            """Every response carries the id, refusals (401, 503) included."""
            if message["type"] in ("http.response.start", "websocket.http.response.start"):
                headers = list(message.get("headers", ()))
                headers.append((b"x-request-id", request_id.encode()))
                message = {**message, "headers": headers}
            await send(message)

        if scope.get("method") == "OPTIONS":  # CORS preflight: no key, no gate
            await self.app(scope, receive, send_with_id)
            return
        if path not in PUBLIC_PATHS:
            if (
                not self.state.ready
                and scope["type"] == "http"
                and not path.startswith(("/docs", "/openapi"))
            ):
                message = self.state.load_error or "Loading model"
                await _refuse(scope, receive, send_with_id, 503, message, "unavailable_error")
                return
            keys = self.state.api_keys
            if keys and not key_matches(presented_key(scope), keys):
                log.info("%s %s: invalid API key", scope.get("method", "WS"), path)
                await _refuse(
                    scope, receive, send_with_id, 401, "Invalid API Key", "authentication_error"
                )
                return

        if scope["type"] == "http" and scope.get("method") == "POST":
            scope = _json_by_default(scope)

        await self.app(scope, receive, send_with_id)


def install_middleware(app: Any, state: Any) -> None:
    """The same outer layers for the single-model server and the router. Outermost first:
    CORS answers preflights, then the gate (request ids, loading, API keys)."""
    from fastapi.middleware.cors import CORSMiddleware

    app.add_middleware(GateMiddleware, state=state)
    app.add_middleware(
        CORSMiddleware,
        allow_origins=["*"],
        allow_credentials=True,
        allow_methods=["*"],
        allow_headers=["*"],
        expose_headers=["x-request-id"],
    )
