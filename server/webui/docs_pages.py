"""`/docs` (Swagger UI) and `/redoc` that work offline: every asset is a vendored file.

FastAPI's own pages load Swagger UI and ReDoc from a CDN, so without a network they are blank.
Here the scripts, the stylesheet and the icon come from `vendor/` (versions in its README.md),
served under `/docs/assets/`, which the loading gate lets through like `/docs` itself.

Every URL in the pages is relative: `--api-prefix /x` strips the prefix before routing, so
an absolute `/docs/assets/...` would miss it. Both pages sit one level down (`/x/docs`,
`/x/redoc`), so `docs/assets/NAME` and `openapi.json` resolve under `/x/`. A Content Security
Policy keeps the browser on this origin: ReDoc's side menu would load its logo from its CDN.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, Response

__all__ = ["ASSETS", "ASSETS_PATH", "Asset", "install"]

VENDOR = Path(__file__).resolve().parent / "vendor"
ASSETS_PATH = "/docs/assets"  # under /docs: served while the model loads, as /docs is
_ASSETS_URL = ASSETS_PATH.lstrip("/")  # relative to the pages, which sit at the top level

JS = "text/javascript; charset=utf-8"
CSS = "text/css; charset=utf-8"
# the files never change for a given llamactl; a day keeps an upgrade's new copies visible
ASSET_HEADERS = {"Cache-Control": "max-age=86400", "X-Content-Type-Options": "nosniff"}


@dataclass(frozen=True)
class Asset:
    """One vendored file and its content type."""

    file: Path
    media_type: str


# The only files served: the URL picks a key here, never a path on disk.
ASSETS: dict[str, Asset] = {
    "swagger-ui-bundle.js": Asset(VENDOR / "swagger-ui" / "swagger-ui-bundle.js", JS),
    "swagger-ui.css": Asset(VENDOR / "swagger-ui" / "swagger-ui.css", CSS),
    "favicon-32x32.png": Asset(VENDOR / "swagger-ui" / "favicon-32x32.png", "image/png"),
    "redoc.standalone.js": Asset(VENDOR / "redoc" / "redoc.standalone.js", JS),
}

# Both UIs inject inline styles and draw icons from data: URLs; ReDoc builds its search worker
# from a blob: URL. Nothing else: no other host, no eval (neither UI needs it).
_CSP_COMMON = (
    "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "object-src 'none'; base-uri 'none'; form-action 'self'"
)
_INLINE_SCRIPT = re.compile(r"<script>(.*?)</script>", re.DOTALL)


def _asset_url(name: str) -> str:
    return f"{_ASSETS_URL}/{name}"


def _inline_script_hashes(html: str) -> str:
    """CSP sources for the page's own inline scripts (Swagger UI's start-up call) only."""
    digests = (hashlib.sha256(s.encode()).digest() for s in _INLINE_SCRIPT.findall(html))
    return " ".join(f"'sha256-{base64.b64encode(d).decode()}'" for d in digests)


def swagger_page(openapi_url: str, title: str) -> tuple[str, str]:
    """Swagger UI's HTML and its CSP. `validatorUrl: null`: otherwise, on a host other than
    localhost, the page shows a badge image fetched from validator.swagger.io."""
    body = get_swagger_ui_html(
        openapi_url=openapi_url,
        title=f"{title} - Swagger UI",
        swagger_js_url=_asset_url("swagger-ui-bundle.js"),
        swagger_css_url=_asset_url("swagger-ui.css"),
        swagger_favicon_url=_asset_url("favicon-32x32.png"),
        swagger_ui_parameters={"validatorUrl": None},
    ).body
    html = bytes(body).decode()
    csp = f"{_CSP_COMMON}; script-src 'self' {_inline_script_hashes(html)}"
    return html, csp


def redoc_page(openapi_url: str, title: str) -> tuple[str, str]:
    """ReDoc's HTML (no Google Fonts link) and its CSP."""
    body = get_redoc_html(
        openapi_url=openapi_url,
        title=f"{title} - ReDoc",
        redoc_js_url=_asset_url("redoc.standalone.js"),
        redoc_favicon_url=_asset_url("favicon-32x32.png"),
        with_google_fonts=False,
    ).body
    html = bytes(body).decode()
    csp = f"{_CSP_COMMON}; script-src 'self'; worker-src blob:"
    return html, csp


def _page(html: str, csp: str) -> Callable[[Request], Awaitable[Response]]:
    """An endpoint answering the same page every time (built once, at install)."""
    headers = {"Content-Security-Policy": csp, "X-Content-Type-Options": "nosniff"}

    async def page(_request: Request) -> Response:
        return HTMLResponse(html, headers=headers)

    return page


async def _asset(request: Request) -> Response:
    """A vendored file by its allow-listed name; any other name is the usual 404."""
    asset = ASSETS.get(request.path_params["name"])
    if asset is None:
        raise HTTPException(404)
    return FileResponse(asset.file, media_type=asset.media_type, headers=ASSET_HEADERS)


def install(app: FastAPI) -> None:
    """Add `/docs`, `/redoc` and `/docs/assets/{name}` to an app built with `docs_url=None,
    redoc_url=None`. Nothing is added when the app has no OpenAPI document."""
    if not app.openapi_url:
        return
    openapi_url = app.openapi_url.lstrip("/")  # relative, as the assets are
    for path, (html, csp) in {
        "/docs": swagger_page(openapi_url, app.title),
        "/redoc": redoc_page(openapi_url, app.title),
    }.items():
        app.add_route(path, _page(html, csp), methods=["GET"], include_in_schema=False)
    # `:path`, so that every name under the prefix reaches the allow-list (a router's
    # catch-all proxy would otherwise take `a/b`)
    app.add_route(ASSETS_PATH + "/{name:path}", _asset, methods=["GET"], include_in_schema=False)
