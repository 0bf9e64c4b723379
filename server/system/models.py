"""`GET /v1/models`: the one model this server holds, with what it can be asked for."""

from __future__ import annotations

import os
import time
from typing import Any

from fastapi import APIRouter, Request

from llamactl import DecisionEngine, Engine, resident_bytes

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
    entry["runtime"] = runtime(state, engine)
    return {"object": "list", "data": [entry]}


def runtime(state: ServerState, engine: Engine | DecisionEngine) -> dict[str, Any]:
    """This process as the router reports each child (`llamactl ps` reads the same keys); a
    decision model's slots are its tasks' and not shown."""
    slots = engine.slots_info() if isinstance(engine, Engine) else []
    return {
        "pid": os.getpid(),
        "port": state.settings.port,
        "memory_bytes": resident_bytes(os.getpid()),
        "slots_total": len(slots) or None,
        "slots_busy": sum(slot.busy for slot in slots),
        "requests": state.in_flight(),
        "loaded_at": int(state.loaded_at or 0),
        "load_seconds": round(state.load_seconds or 0.0, 3),
        "idle_seconds": round(time.monotonic() - state.last_used, 1),
    }


def projector_capabilities(state: ServerState) -> tuple[str, ...]:
    """ "see" / "hear" of the loaded mmproj (a decision model's, or the chat engine's)."""
    projector = state.decisions.dm.projector if state.decisions is not None else None
    if projector is None and state.engine is not None:
        projector = state.engine.projector
    if projector is None:
        return ()
    return tuple(c for c, on in (("see", projector.vision), ("hear", projector.audio)) if on)
