"""`/docs` (Swagger UI) and `/redoc` with no network: every asset is served by llamactl.

The single-model app here never loads its model (no lifespan), so these pages are shown to
work while a model loads, and the tests stay fast. Each page's URLs must be relative, so that
they resolve under `--api-prefix`; each must answer with the right type. The assets route is
an allow-list: hostile names, sent as raw request lines (httpx would tidy `..` away), are 404s.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx
import pytest
import uvicorn
from fastapi.testclient import TestClient
from llamactl.server.app import create_app
from llamactl.server.edge.uvicorn_options import uvicorn_options
from llamactl.server.router import create_router_app
from llamactl.server.state import ServerState
from llamactl.server.webui import docs_pages
from serverkit import free_port, hermetic_settings, serve_app

PAGES = ["docs", "redoc"]
# where a page names what it loads: tags' src/href, Swagger UI's `url:`, ReDoc's `spec-url`
URL_ATTRS = re.compile(r"""(?:\bsrc|\bhref|spec-url)\s*=\s*["']([^"']*)["']|\burl:\s*'([^']*)'""")
TYPES = {
    ".js": "text/javascript",
    ".css": "text/css",
    ".png": "image/png",
    ".json": "application/json",
}


# ---------------------------------------------------------------------------------- servers
@contextlib.contextmanager
def serve_unloaded(**overrides: Any) -> Iterator[str]:
    """The single-model app over real HTTP with its model never loaded; yields its base URL
    (the API prefix included)."""
    settings = hermetic_settings({"threads": 1, "parallel": 1, **overrides})
    app = create_app(settings, state=ServerState(settings, Path("never-loaded.gguf")))
    port = free_port()
    options = uvicorn_options(
        settings, host="127.0.0.1", port=port, log_level="warning", lifespan="off"
    )
    server = uvicorn.Server(uvicorn.Config(app, **options))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}{overrides.get('api_prefix', '')}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@pytest.fixture(scope="module")
def plain() -> Iterator[str]:
    with serve_unloaded() as url:
        yield url


@pytest.fixture(scope="module")
def prefixed() -> Iterator[str]:
    with serve_unloaded(api_prefix="/x") as url:
        yield url


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A router with no models: everything it does not answer itself goes to its proxy."""
    settings = hermetic_settings({"models_dir": str(tmp_path_factory.mktemp("no_models"))})
    with serve_app(create_router_app(settings), settings) as live:
        yield live.url


@pytest.fixture(params=["plain", "prefixed", "router"])
def base(request: pytest.FixtureRequest) -> str:
    return request.getfixturevalue(request.param)


# ------------------------------------------------------------------------------------ pages
def page_urls(html: str) -> list[str]:
    return [a or b for a, b in URL_ATTRS.findall(html)]


def test_the_single_model_server_is_still_loading(plain: str, prefixed: str) -> None:
    """What the pages below are shown beside: the model is not there."""
    assert httpx.get(plain + "/health").status_code == 503
    assert httpx.get(prefixed + "/health").status_code == 503


@pytest.mark.parametrize("page", PAGES)
def test_a_page_names_only_relative_urls(base: str, page: str) -> None:
    r = httpx.get(f"{base}/{page}")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/html")
    assert "http://" not in r.text and "https://" not in r.text and "//cdn" not in r.text
    assert "fonts.googleapis" not in r.text
    urls = page_urls(r.text)
    assert any(u.endswith(".js") for u in urls) and any(u.endswith("openapi.json") for u in urls)
    for url in urls:
        parts = urlsplit(url)
        assert not parts.scheme and not parts.netloc and not url.startswith("/"), url
    csp = r.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "http" not in csp and "*" not in csp


@pytest.mark.parametrize("page", PAGES)
def test_every_url_of_a_page_answers_from_this_server(base: str, page: str) -> None:
    page_url = f"{base}/{page}"
    urls = page_urls(httpx.get(page_url).text)
    for url in urls:
        absolute = urljoin(page_url, url)
        assert absolute.startswith(base + "/"), absolute  # the prefix kept
        r = httpx.get(absolute, timeout=30)
        assert r.status_code == 200, (absolute, r.status_code)
        assert r.headers["content-type"].startswith(TYPES[Path(url).suffix]), absolute
        assert r.content, absolute


def test_assets_are_the_vendored_files(plain: str) -> None:
    for name, asset in docs_pages.ASSETS.items():
        r = httpx.get(f"{plain}/docs/assets/{name}")
        assert r.status_code == 200 and r.content == asset.file.read_bytes(), name
        assert r.headers["content-type"] == asset.media_type
        assert "max-age" in r.headers["cache-control"]


def test_the_allow_list_names_only_files_in_vendor() -> None:
    vendor = docs_pages.VENDOR.resolve()
    for asset in docs_pages.ASSETS.values():
        assert asset.file.is_file() and asset.file.resolve().is_relative_to(vendor)


def test_the_page_routes_are_not_in_the_schema(plain: str) -> None:
    paths = httpx.get(plain + "/openapi.json").json()["paths"]
    assert not any(p.startswith(("/docs", "/redoc")) for p in paths)


def test_with_api_keys_the_pages_need_a_key_as_before() -> None:
    """Unchanged by this module: /docs and its assets are not public (docs/serve.md)."""
    settings = hermetic_settings({"api_key": "s3cret"})
    app = create_app(settings, state=ServerState(settings, Path("never-loaded.gguf")))
    client = TestClient(app, base_url="http://localhost")  # no lifespan: nothing loads
    for path in ("/docs", "/redoc", "/docs/assets/swagger-ui.css"):
        assert client.get(path).status_code == 401, path
        assert client.get(path, headers={"Authorization": "Bearer s3cret"}).status_code == 200


# ---------------------------------------------------------------------------- hostile names
HOSTILE = {
    "dot segments": "/docs/assets/../app.py",
    "dot segments, deeper": "/docs/assets/../../../server/app.py",
    "encoded traversal": "/docs/assets/%2e%2e%2fdocs_pages.py",
    "encoded traversal, deeper": "/docs/assets/%2e%2e%2f%2e%2e%2f%2e%2e%2fpyproject.toml",
    "encoded backslashes": "/docs/assets/..%5c..%5capp.py",
    "absolute path": "/docs/assets//etc/passwd",
    "encoded absolute path": "/docs/assets/%2fetc%2fpasswd",
    "very long name": "/docs/assets/" + "a" * 20_000,
    "NUL": "/docs/assets/swagger-ui.css%00",
    "NUL alone": "/docs/assets/%00",
    "not allow-listed, in vendor": "/docs/assets/LICENSE",
    "vendor's own layout": "/docs/assets/swagger-ui/swagger-ui.css",
    "this module": "/docs/assets/docs_pages.py",
    "case": "/docs/assets/SWAGGER-UI.CSS",
    "trailing slash": "/docs/assets/swagger-ui.css/",
    "the folder": "/docs/assets/",
}


def raw_get(base: str, target: str) -> tuple[int, bytes]:
    """GET `target` exactly as written (no client tidies its path); the status and body."""
    url = urlsplit(base)
    with socket.create_connection((url.hostname, url.port), timeout=30) as sock:
        host = f"{url.hostname}:{url.port}"
        sock.sendall(f"GET {url.path}{target} HTTP/1.1\r\nHost: {host}\r\n".encode())
        sock.sendall(b"Connection: close\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


@pytest.mark.parametrize("target", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_asset_names_are_404(base: str, target: str) -> None:
    status, body = raw_get(base, target)
    assert status == 404, body[:200]
    assert json.loads(body)["error"]["type"] == "not_found_error"  # no file's content
