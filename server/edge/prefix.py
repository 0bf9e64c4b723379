"""`--api-prefix`: the whole API served under a path prefix (llama-server's flag), for a
server behind a reverse proxy that forwards `/llm/...` unchanged.

Requests under the prefix reach every inner layer and route with the prefix taken off, so the
layers that read the path (public paths, error shapes, body limits) need not know of it;
anything else is a 404, as llama-server registers its routes only under the prefix.
(`root_path` is not set: Starlette would strip it a second time from a path that starts with
it again, e.g. `/v1/v1/models` under `--api-prefix /v1`.)
"""

from __future__ import annotations

from llamactl import ConfigError

from .asgi import ASGIApp, Receive, Scope, Send, refuse

__all__ = ["ApiPrefixMiddleware", "normalize_prefix"]


def normalize_prefix(prefix: str) -> str:
    """`api/` → `/api`; "" and "/" mean no prefix."""
    text = prefix.strip().strip("/")
    if not text:
        return ""
    if any(c.isspace() or c in "?#" for c in text):
        raise ConfigError(f"api_prefix: {prefix!r} is not a URL path")
    return "/" + text


class ApiPrefixMiddleware:
    def __init__(self, app: ASGIApp, prefix: str) -> None:
        self.app = app
        self.prefix = prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        rest = path[len(self.prefix) :]
        if not path.startswith(self.prefix) or rest[:1] not in ("", "/"):
            message = f"{path} is not served: the API is under {self.prefix}/"
            await refuse(scope, send, 404, message, "not_found_error")
            return
        if not rest and scope["type"] == "http" and scope.get("method") in ("GET", "HEAD"):
            await _redirect_to_folder(scope, send, self.prefix)  # the page's URLs are relative
            return
        raw = scope.get("raw_path")
        inner = {**scope, "path": rest or "/"}
        if isinstance(raw, bytes) and raw.startswith(self.prefix.encode()):
            inner["raw_path"] = raw[len(self.prefix) :] or b"/"
        await self.app(inner, receive, send)


async def _redirect_to_folder(scope: Scope, send: Send, prefix: str) -> None:
    """`/llm` → `/llm/`: the web page names its files relative to itself, which resolves
    under the prefix only from the folder's URL."""
    query = scope.get("query_string", b"")
    location = prefix.encode() + b"/" + (b"?" + query if query else b"")
    await send(
        {
            "type": "http.response.start",
            "status": 308,
            "headers": [(b"location", location), (b"content-length", b"0")],
        }
    )
    await send({"type": "http.response.body", "body": b""})
