"""Start the real `llamactl serve` app on 127.0.0.1 inside the test process.

Used by the server fixtures in conftest.py. The server runs uvicorn on a thread, with the real
engine on the embedded model, and is reached over real HTTP by the official SDKs and httpx.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from llamactl.server.app import create_app
from llamactl.server.edge.uvicorn_options import uvicorn_options

from llamactl.config import load_settings


@dataclass
class LiveServer:
    url: str
    app: Any
    # every HTTP response so far: (method, path, status), in the order they started
    answered: list[tuple[str, str, int]] = field(default_factory=list)

    @property
    def state(self):
        return self.app.state.llamactl

    @property
    def v1(self) -> str:
        return self.url + "/v1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


DATA = Path(__file__).parent / "data"
THINK_TEMPLATE = DATA / "think-chatml.jinja"


def hermetic_settings(overrides: dict[str, Any]):
    """Settings from `overrides` and defaults only: no user config file, no LLAMACTL_* vars
    (session-scoped servers start before the per-test isolation fixture runs)."""
    prefixes = ("LLAMACTL_", "LLAMA_ARG_", "LLAMA_API_KEY")  # llamactl's and llama-server's
    saved = {k: v for k, v in os.environ.items() if k.startswith(prefixes)}
    for k in saved:
        del os.environ[k]
    try:
        return load_settings(overrides, config_path=os.devnull)
    finally:
        os.environ.update(saved)


@contextlib.contextmanager
def run_server(**overrides: Any) -> Iterator[LiveServer]:
    """Serve with settings `overrides` (flag names: parallel, api_key, chat_template_file...)."""
    overrides.setdefault("parallel", 4)
    overrides.setdefault("threads", 2)
    settings = hermetic_settings(overrides)
    with serve_app(create_app(settings), settings) as live:
        yield live


@contextlib.contextmanager
def serve_app(app: Any, settings: Any) -> Iterator[LiveServer]:
    """Run `app` (the server's or the router's) on a free loopback port until /health is 200,
    with the uvicorn options `llamactl serve` uses."""
    port = free_port()
    options = uvicorn_options(settings, host="127.0.0.1", port=port, log_level="warning")
    answered: list[tuple[str, str, int]] = []
    server = uvicorn.Server(uvicorn.Config(_recording(app, answered), **options))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            health = url + (getattr(settings, "api_prefix", "") or "").rstrip("/") + "/health"
            if httpx.get(health, timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or not thread.is_alive():
            server.should_exit = True
            error = getattr(app.state.llamactl, "load_error", None)
            raise RuntimeError(f"server did not become healthy: {error}")
        time.sleep(0.05)
    try:
        yield LiveServer(url, app, answered)
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def _recording(app: Any, answered: list[tuple[str, str, int]]) -> Any:
    """`app` with each HTTP response's method, path and status appended to `answered` (what
    a client was told, which a real client's own output may hide: Claude Code retries a 400)."""

    async def recorder(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return

        async def send_status(message: Any) -> None:
            if message["type"] == "http.response.start":
                answered.append((scope["method"], scope["path"], message["status"]))
            await send(message)

        await app(scope, receive, send_status)

    return recorder


@dataclass(frozen=True)
class AppRoute:
    """One (method, path) the app answers, and the endpoint behind it."""

    method: str
    path: str
    endpoint: Any
    in_schema: bool
    websocket: bool = False


def app_routes(app: Any) -> list[AppRoute]:
    """Every HTTP and websocket route of a FastAPI app, included routers flattened (FastAPI
    0.165 keeps an included router as one entry of `app.routes`)."""
    from starlette.routing import WebSocketRoute

    try:
        from fastapi.routing import iter_route_contexts
    except ImportError:  # older FastAPI: included routes are copied into app.routes
        contexts: Any = app.routes
    else:
        contexts = list(iter_route_contexts(app.routes))
    found = []
    for route in contexts:
        path = getattr(route, "path", None)
        if path is None:
            continue
        original = getattr(route, "original_route", route)
        in_schema = bool(getattr(original, "include_in_schema", True))
        if isinstance(original, WebSocketRoute):
            found.append(AppRoute("WS", path, original.endpoint, in_schema, websocket=True))
            continue
        for method in sorted(getattr(route, "methods", None) or ()):
            if method != "HEAD":
                found.append(AppRoute(method, path, route.endpoint, in_schema))
    return found
