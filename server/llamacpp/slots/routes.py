"""`GET /slots` (on by default; `--no-slots` answers 501, as llama-server does) and
`POST /slots/{id_slot}?action=save|restore|erase` (with `--slot-save-path`)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from ...common import server_state
from ...errors import APIError, bad_request
from ...prepare import PreparedBodyRoute, off_loop
from ...services import not_supported
from .protocol import (
    SlotActionRequest,
    SlotEraseResponse,
    SlotRestoreResponse,
    SlotRestoreTimings,
    SlotSaveResponse,
    SlotSaveTimings,
)
from .quota import MiB, SlotQuota, SlotQuotaLimits
from .serving import slot_json, valid_filename

__all__ = ["router"]

# a body (save and restore name a file) is checked and parsed in a preparation worker
router = APIRouter(tags=["slots"], route_class=PreparedBodyRoute)


@router.get("/slots", summary="Each slot's state and its current or last job (llama-server)")
async def get_slots(request: Request, fail_on_no_slot: str | None = None) -> JSONResponse:
    state = server_state(request)
    if not state.settings.slots:
        raise not_supported("This server does not support slots endpoint. Start it with `--slots`")
    engine = state.require_text_engine()
    slots = engine.slots_info()
    if fail_on_no_slot and all(s.busy for s in slots):
        raise APIError(503, "no slot available", "unavailable_error")
    content = state.settings.slots_content
    body: list[dict[str, Any]] = await off_loop(
        lambda: [slot_json(engine, s, content=content) for s in slots]
    )
    return JSONResponse(body)


@router.post(
    "/slots/{id_slot}",
    response_model=SlotSaveResponse | SlotRestoreResponse | SlotEraseResponse,
    summary="Save a slot's KV to a file, restore it, or erase it (llama-server)",
)
async def post_slot(
    request: Request, id_slot: str, action: str = "", body: SlotActionRequest | None = None
) -> SlotSaveResponse | SlotRestoreResponse | SlotEraseResponse:
    """Waits while the slot is busy (llama-server defers the task the same way)."""
    state = server_state(request)
    folder = state.settings.slot_save_path
    if folder is None:
        raise not_supported(
            "This server does not support slots action. Start it with `--slot-save-path`"
        )
    try:
        slot = int(id_slot)
    except ValueError:
        raise bad_request("Invalid slot ID") from None
    if action not in ("save", "restore", "erase"):
        raise bad_request("Invalid action")
    files = state.require_text_engine().slot_files
    # The KV side is awaited (a busy slot holds no thread while its job runs); the file side
    # runs in a preparation worker.
    if action == "erase":
        n = await asyncio.wrap_future(files.erase(slot))
        return SlotEraseResponse(id_slot=slot, n_erased=n)
    filename = body.filename if body is not None else None
    if filename is None:
        raise bad_request("save and restore need a `filename`")
    if not valid_filename(filename):
        raise bad_request("Invalid filename")
    path = folder / filename
    t0 = time.perf_counter()
    if action == "save":
        snap = await asyncio.wrap_future(files.snapshot(slot))
        quota = state.family_state(SlotQuota)
        limits = SlotQuotaLimits(
            state.settings.slot_save_quota_mib * MiB, state.settings.slot_save_max_files
        )
        size = files.planned_size(snap)

        def write() -> int:
            with quota.reserve(folder, filename, size, limits):
                return files.write(path, snap)

        n_bytes = await off_loop(write)
        return SlotSaveResponse(
            id_slot=slot,
            filename=filename,
            n_saved=len(snap.tokens),
            n_written=n_bytes,
            timings=SlotSaveTimings(save_ms=_ms_since(t0)),
        )
    snap, n_bytes = await off_loop(files.read, path)
    await asyncio.wrap_future(files.install(slot, snap))
    return SlotRestoreResponse(
        id_slot=slot,
        filename=filename,
        n_restored=len(snap.tokens),
        n_read=n_bytes,
        timings=SlotRestoreTimings(restore_ms=_ms_since(t0)),
    )


def _ms_since(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000.0
