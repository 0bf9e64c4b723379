"""`GET /props` and `POST /props` (the latter behind `--props`; llamactl has no property a
client may change, so it answers llama-server's `{"success": true}`)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from llamactl.engine_settings import sampling_defaults

from ...common import server_state
from ...services import not_supported
from ...state import ServerState
from ...version import server_version
from ..generation_params import generation_params

__all__ = ["router"]

router = APIRouter(tags=["props"])


def props_of(state: ServerState) -> dict[str, Any]:
    engine = state.require_text_engine()
    chat = state.require_chat()
    settings = state.settings
    model = engine.model
    params = generation_params(sampling_defaults(settings), settings.max_tokens)
    params["lora"] = [{"id": i, "scale": s} for i, s in enumerate(engine.lora.key)]
    return {
        "default_generation_settings": {
            "params": params,
            "n_ctx": engine.n_ctx_slot,  # what a slot holds: prompt and answer (/slots, /v1/models)
        },
        "total_slots": engine.config.n_parallel,
        "model_alias": state.model_id,
        "model_path": str(state.model_path),
        "modalities": {"vision": False, "video": False, "audio": False},
        "endpoint_slots": settings.slots,
        "endpoint_props": settings.props,
        "endpoint_metrics": settings.metrics,
        "ui": False,
        "chat_template": chat.template_source,
        "bos_token": model.token_text(model.bos_token_id),
        "eos_token": model.token_text(model.eos_token_id),
        "build_info": f"llamactl {server_version()}",
        "is_sleeping": False,
    }


@router.get("/props", summary="The server's settings and the model's template (llama-server)")
async def get_props(request: Request) -> dict[str, Any]:
    return props_of(server_state(request))


@router.post("/props", summary="Change server properties (llama-server; only with --props)")
async def post_props(request: Request) -> dict[str, Any]:
    state = server_state(request)
    if not state.settings.props:
        raise not_supported(
            "This server does not support changing global properties. Start it with `--props`"
        )
    return {"success": True}
