"""`GET /v1/models`: the one model this server holds, with what it can be asked for."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from ..capabilities import architecture, served_capabilities
from ..state import ServerState
from .engine_of import loaded_engine

__all__ = ["router"]

router = APIRouter()


@router.get("/v1/models", tags=["models"])
@router.get("/models", include_in_schema=False)
def list_models(request: Request) -> dict:
    state: ServerState = request.app.state.llamactl
    engine = loaded_engine(state)
    info = engine.model.info
    entry: dict[str, Any] = {
        "id": state.model_id,
        "object": "model",
        "created": int(state.metrics.started),
        "owned_by": "llamactl",
        "aliases": state.aliases,  # llama-server's: every name a request may use (--alias)
        "tags": state.settings.tags,
        "meta": {
            "architecture": info.architecture,
            "n_ctx_train": info.n_ctx_train,
            "n_ctx_slot": engine.n_ctx_slot,
            "n_params": info.n_params,
            "n_vocab": info.n_vocab,
            "size": info.size_bytes,
        },
    }
    projector = projector_capabilities(state)
    entry["capabilities"] = served_capabilities(info.capabilities, projector)
    entry["architecture"] = architecture(info.capabilities, projector)
    return {"object": "list", "data": [entry]}


def projector_capabilities(state: ServerState) -> tuple[str, ...]:
    """ "see" / "hear" of the loaded mmproj (a decision model's, or the chat engine's)."""
    projector = state.decisions.dm.projector if state.decisions is not None else None
    if projector is None and state.engine is not None:
        projector = state.engine.projector
    if projector is None:
        return ()
    return tuple(c for c, on in (("see", projector.vision), ("hear", projector.audio)) if on)
