"""The `/v1/realtime` websocket route. API keys were checked at the handshake by the
gate middleware (401 before the upgrade)."""

from __future__ import annotations

from fastapi import APIRouter, WebSocket

from .connection import Connection
from .kinds import SESSION_KINDS

router = APIRouter(tags=["realtime"])


@router.websocket("/v1/realtime")
@router.websocket("/realtime")
async def realtime(ws: WebSocket) -> None:
    """`?intent=transcription` opens a transcription session; otherwise a conversation
    session (`session.type: "realtime"`), until a `session.update` picks the type."""
    intent = ws.query_params.get("intent", "")
    kind = "transcription" if intent == "transcription" else "realtime"
    await Connection(ws, SESSION_KINDS).run(kind)
