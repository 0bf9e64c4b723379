"""The routes the router answers itself: health, the model list with each model's status,
and explicit load / unload. Everything else is proxied to a child."""

from __future__ import annotations

import json
import time
from typing import Any

from fastapi import APIRouter, Request

from ..errors import APIError
from .manager import ModelState, Status
from .proxy import MISSING_MODEL
from .state import RouterState

router = APIRouter()


def router_state(request: Request) -> RouterState:
    return request.app.state.llamactl


@router.get("/health", tags=["health"])
@router.get("/v1/health", include_in_schema=False)
async def health() -> dict[str, str]:
    """The router is up; each model's own state is in /models."""
    # a coroutine: it answers on the event loop while every pool thread is taken
    return {"status": "ok"}


@router.get("/v1/models", tags=["models"])
@router.get("/models", include_in_schema=False)
def list_models(request: Request) -> dict[str, Any]:
    """Every model the router serves, loaded or not, with its status and capabilities."""
    rs = router_state(request)
    return {"object": "list", "data": [model_entry(rs, s) for s in rs.manager.states.values()]}


@router.post("/models/load", tags=["models"])
async def load_model(request: Request) -> dict[str, Any]:
    """Load a model now (waits until it is ready); a no-op when it is loaded already."""
    rs = router_state(request)
    state = await rs.manager.load(await _model_name(request))
    return {"success": True, "model": model_entry(rs, state)}


@router.post("/models/unload", tags=["models"])
async def unload_model(request: Request) -> dict[str, Any]:
    """Stop a model's child; requests still running on it end with an error."""
    rs = router_state(request)
    state = await rs.manager.unload(await _model_name(request))
    return {"success": True, "model": model_entry(rs, state)}


# /models/load and /models/unload take `{"model": NAME}`: nothing larger is parsed.
MAX_CONTROL_BODY = 64 * 1024


async def _model_name(request: Request) -> str:
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_CONTROL_BODY:
            raise APIError(413, f"the body of {request.url.path} is limited to 64 KiB")
    name: Any = None
    if raw.strip():
        try:
            data = json.loads(raw)
        except ValueError:
            raise APIError(400, "the request body is not valid JSON") from None
        name = data.get("model") if isinstance(data, dict) else None
    name = name or request.query_params.get("model")
    if not isinstance(name, str) or not name:
        raise APIError(400, MISSING_MODEL)
    return name


def model_entry(rs: RouterState, state: ModelState) -> dict[str, Any]:
    """One model as /models and /v1/models show it (OpenAI's list entry, plus status)."""
    spec = state.spec
    status: dict[str, Any] = {"value": state.status.value}
    if state.status is Status.FAILED:
        status["message"] = state.message
        if state.exit_code is not None:
            status["exit_code"] = state.exit_code
    entry: dict[str, Any] = {
        "id": spec.name,
        "object": "model",
        "created": int(rs.started),
        "owned_by": "llamactl",
        "aliases": list(spec.aliases),
        "status": status,
        "capabilities": spec.serves,
        "architecture": {
            "input_modalities": spec.input_modalities,
            "output_modalities": spec.output_modalities,
        },
        "meta": {
            "path": str(spec.path) if spec.path else None,
            "source": spec.source,
            "architecture": spec.architecture,
            "n_ctx_train": spec.context_length,
            "size": spec.size_bytes,
        },
    }
    child = state.child
    if state.status is Status.LOADED and child is not None:
        slots = rs.slots(spec)
        entry["runtime"] = {
            "pid": child.pid,
            "port": child.port,
            "memory_bytes": child.rss_bytes(),
            "slots_total": slots,
            "slots_busy": min(state.in_flight, slots),
            "requests": state.in_flight,
            "loaded_at": int(state.loaded_at or 0),
            "load_seconds": round(state.load_seconds or 0.0, 3),
            "idle_seconds": round(time.monotonic() - state.last_used, 1),
        }
    return entry
