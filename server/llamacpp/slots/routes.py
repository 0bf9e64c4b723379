"""`GET /slots` (on by default; `--no-slots` answers 501, as llama-server does)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from ...common import server_state
from ...errors import APIError
from ...prepare import off_loop
from ...services import not_supported
from .serving import slot_json

__all__ = ["router"]

router = APIRouter(tags=["slots"])


@router.get("/slots", summary="Each slot's state and its current or last job (llama-server)")
async def get_slots(request: Request, fail_on_no_slot: str | None = None) -> JSONResponse:
    state = server_state(request)
    if not state.settings.slots:
        raise not_supported("This server does not support slots endpoint. Start it with `--slots`")
    engine = state.require_text_engine()
    slots = engine.slots_info()
    if fail_on_no_slot and all(s.busy for s in slots):
        raise APIError(503, "no slot available", "unavailable_error")
    body: list[dict[str, Any]] = await off_loop(lambda: [slot_json(engine, s) for s in slots])
    return JSONResponse(body)
