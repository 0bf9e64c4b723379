"""`GET /` (the chat page) and `GET /webui/NAME` (its files), unless `--no-webui`.

The page and its files are public, as llama-server's are: they hold no data, and the page
asks for the API key itself (every API call it makes needs it). Only the files shipped in
`static/` are served, looked up by name in a table made at import: no path is ever built
from the URL. A Content-Security-Policy keeps the page to this server alone.
"""

from __future__ import annotations

import functools
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ..errors import APIError

__all__ = ["ASSET_PREFIX", "router"]

ASSET_PREFIX = "/webui/"
_STATIC = Path(__file__).with_name("static")
_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}
_FILES: dict[str, Path] = {
    p.name: p for p in sorted(_STATIC.iterdir()) if p.is_file() and p.suffix in _TYPES
}
# the page's own files and same-origin API calls and sockets only; images and sound the user
# attaches or hears are data: and blob: URLs made in the page
CSP = (
    "default-src 'self'; img-src 'self' data: blob:; media-src 'self' blob: data:; "
    "connect-src 'self'; style-src 'self'; script-src 'self'; object-src 'none'; "
    "base-uri 'none'; frame-ancestors 'none'; form-action 'none'"
)
_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",  # revalidated: a new llamactl's page is seen at once
}

router = APIRouter(include_in_schema=False)


@functools.cache
def _content(name: str) -> bytes:
    """A shipped file's bytes, read once (they do not change while the server runs)."""
    return _FILES[name].read_bytes()


def _file(name: str) -> Response:
    path = _FILES.get(name)
    if path is None:
        raise APIError(404, "File Not Found", "not_found_error")
    return Response(_content(name), media_type=_TYPES[path.suffix], headers=_HEADERS)


def _enabled(request: Request) -> None:
    if not request.app.state.llamactl.settings.webui:
        raise APIError(404, "File Not Found (the web page is off: --no-webui)", "not_found_error")


@router.get("/")
def page(request: Request) -> Response:
    _enabled(request)
    return _file("index.html")


@router.get(ASSET_PREFIX + "{name}")
def asset(request: Request, name: str) -> Response:
    _enabled(request)
    return _file(name)
