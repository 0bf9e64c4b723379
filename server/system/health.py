"""`GET /health`: what a balancer's health check reads."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from ..app_state import AppState
from ..errors import error_response

__all__ = ["router"]

router = APIRouter()


@router.get("/health", tags=["health"])
@router.get("/v1/health", include_in_schema=False)
async def health(request: Request) -> JSONResponse:
    """200 once the model is loaded; 503 `unavailable_error` while it loads (or failed) and
    once a graceful stop has begun, so a balancer sends nothing more here."""
    # A coroutine that reads three attributes: it needs no worker thread, so it answers while
    # every thread of the pool is taken (a sync route waits for one).
    state: AppState = request.app.state.llamactl
    if state.draining:
        return error_response(request.url.path, 503, "Server is shutting down")
    if state.ready:
        return JSONResponse({"status": "ok"})
    message = state.load_error or "Loading model"
    return error_response(request.url.path, 503, message)
