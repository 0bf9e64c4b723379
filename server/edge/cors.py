"""The CORS layer: allowed origins get CORS headers, others are refused outright.

Refusing (403) rather than only leaving the headers out matters: a "simple" cross-site POST
(text/plain or a form type, which the server reads as JSON like llama-server does) runs
without a preflight, so a page the user visits could make the server generate even if it
could not read the answer. Websocket handshakes are checked the same way, since browsers
apply no CORS to websockets at all.
"""

from __future__ import annotations

import logging
from typing import Any

from .asgi import ASGIApp, Receive, Scope, Send, header, refuse
from .origins import OriginPolicy

__all__ = ["CorsMiddleware"]

log = logging.getLogger("llamactl.server")

_METHODS = b"DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT"
_PREFLIGHT_MAX_AGE = b"600"
_EXPOSED = b"x-request-id"


class CorsMiddleware:
    def __init__(self, app: ASGIApp, policy: OriginPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        origin = header(scope, b"origin") if scope["type"] in ("http", "websocket") else ""
        if not origin:  # not a browser, or a same-origin GET: nothing to decide
            await self.app(scope, receive, send)
            return
        if not self.policy.allows(origin, header(scope, b"host")):
            log.info("%s %s: origin %r refused", scope.get("method", "WS"), scope["path"], origin)
            message = f"origin {origin!r} may not call this server (allowed: see --cors-origins)"
            await refuse(scope, send, 403, message, "permission_error")
            return
        allow = [
            (b"access-control-allow-origin", origin.encode("latin-1")),
            (b"access-control-allow-credentials", b"true"),
        ]
        if scope["type"] == "http" and _is_preflight(scope):
            requested = header(scope, b"access-control-request-headers").encode("latin-1")
            headers = [
                *allow,
                (b"vary", b"Origin"),
                (b"access-control-allow-methods", _METHODS),
                (b"access-control-max-age", _PREFLIGHT_MAX_AGE),
                (b"content-length", b"0"),
            ]
            if requested:
                headers.append((b"access-control-allow-headers", requested))
            if header(scope, b"access-control-request-private-network").lower() == "true":
                # Chrome's Private Network Access: a public page the user allowed may reach
                # this local server only if the preflight says so.
                headers.append((b"access-control-allow-private-network", b"true"))
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": b""})
            return

        async def send_with_cors(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": _with_cors(message.get("headers", ()), allow)}
            await send(message)

        await self.app(scope, receive, send_with_cors)


def _is_preflight(scope: Scope) -> bool:
    return scope.get("method") == "OPTIONS" and bool(
        header(scope, b"access-control-request-method")
    )


def _with_cors(headers: Any, allow: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The response's headers with ours instead of any CORS headers it set itself, and
    `Origin` added to its `Vary` (the answer depends on it)."""
    kept, vary = [], [b"Origin"]
    for key, value in headers:
        name = key.lower()
        if name == b"vary":
            vary.insert(0, value)
        elif not name.startswith(b"access-control-"):
            kept.append((key, value))
    return [
        *kept,
        *allow,
        (b"access-control-expose-headers", _EXPOSED),
        (b"vary", b", ".join(vary)),
    ]
