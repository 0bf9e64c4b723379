"""`create_router_app(settings)`: the FastAPI app of `llamactl serve` in router mode."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Request
from starlette.routing import Route, WebSocketRoute

from llamactl.config import Settings

from .. import precheck
from ..errors import APIError, install_handlers
from ..middleware import install_middleware
from ..webui import docs_pages
from ..webui import routes as webui_routes
from . import routes
from .catalog import ModelSpec, build_catalog
from .child import ChildProcess
from .command import DEFAULT_LAUNCHER, child_argv, child_env, new_secret
from .listener import ChildListener
from .manager import ModelManager
from .proof import PROOF_PATH
from .proxy import HttpProxy
from .state import RouterState
from .wsproxy import WebSocketProxy


def create_router_app(
    settings: Settings,
    *,
    models_dir: Path | None = None,
    launcher: Sequence[str] = DEFAULT_LAUNCHER,
    load_timeout: float = 300.0,
) -> FastAPI:
    """Serve the preset's models and those in `models_dir`; none is loaded until asked for.

    `launcher` is the command that `serve ...` is appended to for each child (tests use a
    child with extra routes); `load_timeout` bounds a child's start and a request's wait.
    """
    catalog = build_catalog(settings, models_dir)

    def make_child(spec: ModelSpec) -> ChildProcess:
        secret = new_secret()  # a new one for every process, restarts included
        env = child_env(settings, spec, secret)
        listener = ChildListener()  # bound and listening before the child exists
        try:
            argv = child_argv(spec, listener.port, tuple(launcher), listen_fd=listener.fd)
        except BaseException:
            listener.retire()
            raise
        return ChildProcess(spec.name, argv, env, listener, secret)

    manager = ModelManager(
        catalog,
        make_child,
        max_loaded=settings.models_max,
        idle_seconds=settings.sleep_idle_seconds,
        load_timeout=load_timeout,
    )
    state = RouterState(settings, manager)
    http_proxy = HttpProxy(manager, autoload=settings.models_autoload)
    manager.on_child_gone = lambda child: http_proxy.upstreams.forget(child.port)
    ws_proxy = WebSocketProxy(manager, autoload=settings.models_autoload)

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        await manager.start()
        try:
            yield
        finally:
            await http_proxy.aclose()
            await manager.close()
            precheck.shutdown()

    app = FastAPI(
        title="llamactl router",
        summary="Many local llama.cpp models behind one OpenAI- and Anthropic-compatible API",
        lifespan=lifespan,
        docs_url=None,  # /docs and /redoc: webui.docs_pages, offline
        redoc_url=None,
    )
    app.state.llamactl = state
    install_handlers(app)
    app.include_router(routes.router)
    docs_pages.install(app)  # before the catch-all proxy below
    app.include_router(webui_routes.router)
    # A child's proof is the router's to ask for: it is not forwarded from clients.
    app.router.routes.append(
        Route(PROOF_PATH, _not_forwarded, methods=_ANY_METHOD, include_in_schema=False)
    )
    # Everything else goes to the child of the model the request names.
    app.router.routes.append(Route("/{path:path}", http_proxy, include_in_schema=False))
    app.router.routes.append(WebSocketRoute("/{path:path}", ws_proxy))
    install_middleware(app, state)
    return app


# every method: a route matching only GET would leave the others to the catch-all proxy
_ANY_METHOD = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


async def _not_forwarded(request: Request) -> None:
    raise APIError(404, f"{PROOF_PATH} is answered by the router's children, to the router only")
