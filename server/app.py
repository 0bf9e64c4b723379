"""`create_app(settings)`: the FastAPI application behind `llamactl serve`."""

from __future__ import annotations

from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI

from llamactl.config import Settings
from llamactl.models import resolve_model

from . import openapi_errors, precheck, system
from .errors import install_handlers
from .middleware import install_middleware
from .state import ServerState
from .version import server_version
from .webui import docs_pages
from .webui import routes as webui_routes

# API families, added as "module:attribute" of this package
API_ROUTERS: list[str] = [
    "anthropic.messages:router",
    "openai.chat:router",
    "openai.completions:router",
    "openai.responses.routes:router",
    "openai.audio:router",
    "openai.realtime:router",
    "llamacpp.decisions:router",
    "llamacpp.tts:router",
    "llamacpp.tokens:router",
    "openai.embeddings:router",
    "llamacpp.embeddings:router",
    "llamacpp.rerank:router",
    "llamacpp.completion:router",
    "llamacpp.infill:router",
    "llamacpp.slots:router",
    "llamacpp.props:router",
    "llamacpp.lora:router",
]


def _routers():
    import importlib

    for spec in API_ROUTERS:
        module, attr = spec.split(":")
        yield getattr(importlib.import_module(f"{__package__}.{module}"), attr)


def create_app(
    settings: Settings,
    *,
    model_path: Path | None = None,
    mmproj: Path | None = None,
    no_mmproj: bool = False,
    state: ServerState | None = None,
) -> FastAPI:
    """Build the app; the model starts loading when the app starts (lifespan). `mmproj` is the
    model's projector (`--mmproj`; for a decision model, default: the one found beside it,
    unless `no_mmproj`)."""
    if state is None:
        path = model_path or resolve_model(settings).path
        state = ServerState(settings, Path(path), mmproj=mmproj, find_mmproj=not no_mmproj)

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        if not state.ready and state.load_error is None:
            state.start_loading()
        try:
            yield
        finally:
            precheck.shutdown()
            state.close()

    app = FastAPI(
        title="llamactl",
        version=server_version(),
        summary="OpenAI- and Anthropic-compatible API over a local llama.cpp model",
        lifespan=lifespan,
        docs_url=None,  # /docs and /redoc: webui.docs_pages, offline
        redoc_url=None,
    )
    app.state.llamactl = state
    install_handlers(app)
    openapi_errors.install(app)
    app.include_router(system.router)
    docs_pages.install(app)
    app.include_router(webui_routes.router)
    for router in _routers():
        app.include_router(router)
    install_middleware(app, state)
    return app
