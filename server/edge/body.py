"""Bounds on request bodies: a size (`--max-body-size`, 413) and a time to receive the whole
body (`--body-timeout`, 408).

A body whose Content-Length is over the limit is refused before any of it is read; a chunked
body is counted as it arrives and refused as soon as it passes the limit. The body is read
here, under both bounds, and handed to the app whole, so a client sending a byte a second
cannot hold a connection (and the task behind it) forever. File uploads (multipart forms)
are taken by the upload routes only (`UPLOAD_PATHS`, the routes whose OpenAPI body is
multipart), and may be as large as the audio upload limit when that is more than
--max-body-size; a multipart body sent anywhere else is refused (415) before any of it is read,
as no other route reads a form.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from .asgi import ASGIApp, Receive, Scope, Send, header, refuse

__all__ = ["UPLOAD_PATHS", "BodyLimitMiddleware", "MiB"]

log = logging.getLogger("llamactl.server")

MiB = 1024 * 1024
_CLOSE = ((b"connection", b"close"),)  # what is left of the body is never read

# The routes that read a multipart form (tests/test_hardening_http_edge.py checks this against
# the OpenAPI document). Paths as the app sees them, after --api-prefix is taken off.
UPLOAD_PATHS = frozenset({"/v1/audio/transcriptions", "/audio/transcriptions", "/tts"})


def _size(n: int) -> str:
    return f"{n // MiB} MiB" if n % MiB == 0 else f"{n} bytes"


class BodyLimitMiddleware:
    def __init__(
        self, app: ASGIApp, *, max_bytes: int, upload_max_bytes: int, timeout: float
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.upload_max_bytes = max(upload_max_bytes, max_bytes)
        self.timeout = timeout

    def limit_for(self, scope: Scope) -> tuple[int, str]:
        """The limit for this request and the refusal naming it."""
        if _is_multipart(scope) and scope["path"] in UPLOAD_PATHS:
            limit = self.upload_max_bytes
            message = (
                f"an upload may be at most {_size(limit)} "
                "(--max-body-size or the audio file limit, whichever is larger)"
            )
            return limit, message
        limit = self.max_bytes
        return limit, f"a request body may be at most {_size(limit)} (--max-body-size)"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if _is_multipart(scope) and scope["path"] not in UPLOAD_PATHS:
            routes = ", ".join(sorted(UPLOAD_PATHS))
            await refuse(
                scope,
                send,
                415,
                f"a multipart body is accepted only by the upload routes ({routes}); "
                f"{scope['path']} takes JSON",
                "invalid_request_error",
                _CLOSE,
            )
            return
        limit, too_large = self.limit_for(scope)
        declared = header(scope, b"content-length").strip()
        if declared.isdigit() and int(declared) > limit:
            await refuse(scope, send, 413, too_large, "request_too_large_error", _CLOSE)
            return
        chunks: list[bytes] = []
        received = 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        while True:
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except asyncio.TimeoutError:
                slow = f"the request body did not arrive within {self.timeout:g} s (--body-timeout)"
                log.info("%s %s: %s", scope["method"], scope["path"], slow)
                await refuse(scope, send, 408, slow, "timeout_error", _CLOSE)
                return
            if message["type"] == "http.disconnect":
                return  # the client left before sending its request: nobody to answer
            body = message.get("body", b"")
            received += len(body)
            if received > limit:
                await refuse(scope, send, 413, too_large, "request_too_large_error", _CLOSE)
                return
            if body:
                chunks.append(body)
            if not message.get("more_body", False):
                break
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)  # no copy for one chunk
        await self.app(scope, _replay(body, receive), send)


def _is_multipart(scope: Scope) -> bool:
    return header(scope, b"content-type").lower().startswith("multipart/")


def _replay(body: bytes, receive: Receive) -> Receive:
    """The body in one message, then the server's own receive (which reports a disconnect)."""
    pending: list[dict[str, Any]] = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> dict[str, Any]:
        if pending:
            return pending.pop()
        return await receive()

    return replayed
