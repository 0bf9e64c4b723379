"""The outer layers of the server and the router: request ids, the Host and Origin checks,
the loading gate and API keys, body bounds. HTTP and websockets alike.

Plain ASGI (not Starlette's BaseHTTPMiddleware) so a websocket handshake is refused before the
upgrade, and streaming responses pass through untouched. The edge layers live in `.edge`.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from typing import Any

from .app_state import AppState
from .edge.asgi import ASGIApp, Receive, Scope, Send, header, refuse
from .edge.body import BodyLimitMiddleware, MiB
from .edge.cors import CorsMiddleware
from .edge.hosts import HostCheckMiddleware, HostPolicy
from .edge.origins import OriginPolicy
from .edge.prefix import ApiPrefixMiddleware, normalize_prefix
from .edge.request_id import RequestIdMiddleware
from .edge.write_timeout import WriteTimeoutMiddleware

__all__ = [
    "ASGIApp",
    "KEY_SUBPROTOCOL",
    "REALTIME_SUBPROTOCOL",
    "GateMiddleware",
    "PUBLIC_PATHS",
    "PUBLIC_PREFIXES",
    "Receive",
    "Scope",
    "Send",
    "install_middleware",
    "key_matches",
    "presented_key",
]

log = logging.getLogger("llamactl.server")

PUBLIC_PATHS = frozenset({"/health", "/v1/health", "/"})
PUBLIC_PREFIXES = ("/webui/",)  # the page's files: no data in them, and the page asks for a key


REALTIME_SUBPROTOCOL = "realtime"
KEY_SUBPROTOCOL = "openai-insecure-api-key."  # + the key: how a browser's socket carries it


def presented_key(scope: Scope) -> str:
    """llama-server's rule: `Authorization` (a leading "Bearer " stripped); only when that
    header is empty, `X-Api-Key`. A websocket from a browser, which cannot set headers, may
    carry it as OpenAI's subprotocol `openai-insecure-api-key.KEY` instead."""
    auth = header(scope, b"authorization").strip()
    if auth:
        return auth[7:].strip() if auth[:7].lower() == "bearer " else auth
    key = header(scope, b"x-api-key").strip()
    if key or scope.get("type") != "websocket":
        return key
    for protocol in scope.get("subprotocols", ()):
        if protocol.startswith(KEY_SUBPROTOCOL):
            return protocol[len(KEY_SUBPROTOCOL) :]
    return ""


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def key_matches(presented: str, keys: list[str]) -> bool:
    """Constant-time comparison against every configured key (no early exit). Digests are
    compared, so that neither a key's content nor its length shows in the time taken."""
    given = _digest(presented)
    ok = False
    for key in keys:
        ok |= hmac.compare_digest(given, _digest(key))
    return ok


def _json_by_default(scope: Scope) -> Scope:
    """Bodies sent without a JSON content type (`curl -d '{...}'` sends a form type) are read
    as JSON, as llama-server does; multipart uploads keep their type. (A cross-site page
    cannot use this to skip the CORS preflight: the Origin check refuses it first.)"""
    ctype = header(scope, b"content-type").lower()
    if ctype.startswith(("application/json", "multipart/")) or "+json" in ctype:
        return scope
    headers = [(k, v) for k, v in scope.get("headers", ()) if k.lower() != b"content-type"]
    headers.append((b"content-type", b"application/json"))
    return {**scope, "headers": headers}


class GateMiddleware:
    """503 while loading, then API keys. `state` is the app's ServerState (or RouterState)."""

    def __init__(self, app: ASGIApp, state: AppState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if scope.get("method") == "OPTIONS":  # CORS preflights come before keys
            await self.app(scope, receive, send)
            return
        if path not in PUBLIC_PATHS and not path.startswith(PUBLIC_PREFIXES):
            if (
                not self.state.ready
                and scope["type"] == "http"
                and not path.startswith(("/docs", "/openapi", "/redoc"))
            ):
                message = self.state.load_error or "Loading model"
                await refuse(scope, send, 503, message, "unavailable_error")
                return
            keys = self.state.api_keys
            if keys and not key_matches(presented_key(scope), keys):
                log.info("%s %s: invalid API key", scope.get("method", "WS"), path)
                await refuse(scope, send, 401, "Invalid API Key", "authentication_error")
                return

        if scope["type"] == "http" and scope.get("method") == "POST":
            scope = _json_by_default(scope)

        await self.app(scope, receive, send)


def _upload_max_bytes(settings: Any) -> int:
    """File uploads may reach the transcription route's own limit (plus room for the form's
    other fields) even when --max-body-size is smaller."""
    return settings.max_audio_upload_mib * MiB + MiB


def install_middleware(app: Any, state: AppState) -> None:
    """The same outer layers for the single-model server and the router, from `state.settings`.
    Outermost first: request id (so every refusal carries it), the API prefix, Host check,
    Origin check and CORS headers (refusals below carry them, so a page can read why), the
    write timeout, the gate (loading, API keys), then the body bounds (so an unauthenticated
    client's body is never read)."""
    settings = state.settings
    # add_middleware wraps: the last one added is the outermost.
    app.add_middleware(
        BodyLimitMiddleware,
        max_bytes=settings.max_body_size * MiB,
        upload_max_bytes=_upload_max_bytes(settings),
        timeout=settings.body_timeout,
    )
    app.add_middleware(GateMiddleware, state=state)
    app.add_middleware(WriteTimeoutMiddleware, timeout=settings.timeout)
    app.add_middleware(CorsMiddleware, policy=OriginPolicy(settings.cors_origins))
    hosts = HostPolicy(settings.host, settings.allowed_hosts)
    app.add_middleware(HostCheckMiddleware, policy=hosts)
    prefix = normalize_prefix(settings.api_prefix)
    if prefix:
        app.add_middleware(ApiPrefixMiddleware, prefix=prefix)
    app.add_middleware(RequestIdMiddleware)
