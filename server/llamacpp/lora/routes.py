"""`GET /lora-adapters` lists the adapters loaded at start (`--lora`, `--lora-scaled`) with
their global scales; `POST /lora-adapters` sets those scales (an adapter left out gets 0, as
llama-server reads the list). The change is applied between decode steps once running
requests have ended; see docs/serve.md, LoRA adapters.

The body is parsed and validated in a preparation worker (`PreparedBodyRoute`), with the
JSON-value limit checked first on a big one: 25 MiB of `{"id": 0, "scale": 1}` parsed on the
event loop froze every client for 22 s."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Body, Request
from fastapi.responses import JSONResponse

from llamactl import LlamactlError

from ...common import server_state
from ...errors import from_engine_error
from ...prepare import PreparedBodyRoute
from .protocol import LoraAdapterInfo, LoraScale, LoraSetResponse

__all__ = ["router"]

router = APIRouter(tags=["lora"], route_class=PreparedBodyRoute)


@router.get(
    "/lora-adapters",
    summary="The loaded LoRA adapters and their global scales (llama-server)",
    response_model=list[LoraAdapterInfo],
    response_model_exclude_none=True,
)
async def get_lora_adapters(request: Request) -> JSONResponse:
    engine = server_state(request).require_text_engine()
    return JSONResponse(engine.lora_adapters())


@router.post(
    "/lora-adapters",
    summary="Set the LoRA adapters' global scales (llama-server)",
    response_model=LoraSetResponse,
)
async def post_lora_adapters(
    request: Request, body: list[LoraScale] = Body(...)
) -> LoraSetResponse:
    engine = server_state(request).require_text_engine()
    entries = [e.model_dump() for e in body]
    try:
        await asyncio.wrap_future(engine.set_lora_scales(entries))
    except LlamactlError as exc:
        raise from_engine_error(exc) from exc
    return LoraSetResponse()
