"""One realtime websocket: JSON framing, the ordered writer, errors, and the reader loop.

Everything the server sends goes through one queue and one writer task, so events keep the
order in which they were produced (the transcription session relies on that for "committed
before its transcript"). Client mistakes become `error` events and the socket stays usable;
when the client leaves, the session is closed at once and its resources freed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

from fastapi import WebSocket
from starlette.websockets import WebSocketDisconnect, WebSocketState

from .events import ProtocolError, event
from .session import RealtimeSession

log = logging.getLogger("llamactl.server.realtime")

MAX_EVENT_BYTES = 24 * 1024 * 1024


def session_kinds() -> dict[str, type[RealtimeSession]]:
    """`session.type` -> session class. Conversation sessions ("realtime") register here."""
    from .conversation import ConversationSession
    from .transcription import TranscriptionSession

    return {"transcription": TranscriptionSession, "realtime": ConversationSession}


class Connection:
    def __init__(self, ws: WebSocket) -> None:
        self.ws = ws
        self.app = ws.app
        self.session: RealtimeSession | None = None
        self._out: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._starting: asyncio.Task[None] | None = None
        self._reply_after_start = False
        self._closing = False

    # ---------------------------------------------------------------- output
    def send(self, message: dict[str, Any]) -> None:
        """Queue a server event (event-loop thread only)."""
        if not self._closing:
            self._out.put_nowait(message)

    def send_error(self, exc: ProtocolError, event_id: str | None = None) -> None:
        self.send(exc.to_event(event_id))

    def close_soon(self) -> None:
        """Close the socket after the events queued so far (fatal session errors)."""
        self._out.put_nowait(None)
        self._closing = True

    async def _write(self) -> None:
        while True:
            message = await self._out.get()
            if message is None:
                with contextlib.suppress(Exception):
                    await self.ws.close(code=1011)
                return
            try:
                await self.ws.send_text(json.dumps(message, ensure_ascii=False))
            except Exception:  # the client is gone; the reader will notice too
                return

    # ------------------------------------------------------------------ run
    async def run(self, kind: str) -> None:
        await self.ws.accept()
        writer = asyncio.create_task(self._write())
        try:
            self._open(kind)
            await self._read()
        finally:
            if self._starting is not None and not self._starting.done():
                self._starting.cancel()
                with contextlib.suppress(BaseException):
                    await self._starting
            if self.session is not None:
                await self.session.close()
            self._closing = True
            self._out.put_nowait(None)
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(writer, timeout=5)

    def _open(self, kind: str) -> None:
        cls = session_kinds()[kind]
        self.session = cls(self)
        self._starting = asyncio.create_task(self._start(self.session))

    async def _start(self, session: RealtimeSession) -> None:
        try:
            await session.start()
        except ProtocolError as exc:
            self.send_error(exc)
            if exc.type == "server_error":
                self.close_soon()
            return
        if session.live and session is self.session:
            self.send(event("session.created", session=session.session_object()))
            if self._reply_after_start:
                self._reply_after_start = False
                self.send(event("session.updated", session=session.session_object()))

    async def _read(self) -> None:
        while True:
            try:
                message = await self.ws.receive()
            except (WebSocketDisconnect, RuntimeError):
                return
            if message["type"] == "websocket.disconnect":
                return
            if self.ws.client_state != WebSocketState.CONNECTED or self._closing:
                return
            text = message.get("text")
            if text is None:
                self.send_error(
                    ProtocolError("send client events as JSON text frames", code="invalid_frame")
                )
                continue
            if len(text) > MAX_EVENT_BYTES:
                self.send_error(
                    ProtocolError("the event is too large (24 MiB at most)", code="event_too_big")
                )
                continue
            try:
                client_event = json.loads(text)
            except ValueError as exc:
                self.send_error(ProtocolError(f"invalid JSON: {exc}", code="invalid_json"))
                continue
            if not isinstance(client_event, dict) or not isinstance(client_event.get("type"), str):
                self.send_error(
                    ProtocolError(
                        "a client event is a JSON object with a string 'type'",
                        code="invalid_event",
                        param="type",
                    )
                )
                continue
            event_id = client_event.get("event_id")
            try:
                await self._dispatch(client_event)
            except ProtocolError as exc:
                self.send_error(exc, event_id if isinstance(event_id, str) else None)

    async def _dispatch(self, client_event: dict[str, Any]) -> None:
        type_ = client_event["type"]
        session = self.session
        assert session is not None
        if type_ != "session.update":
            await session.handle(type_, client_event)
            return
        update = client_event.get("session")
        if not isinstance(update, dict):
            raise ProtocolError("session.update needs a 'session' object", param="session")
        wanted = update.get("type")
        if wanted is not None and wanted != session.kind:
            if wanted not in session_kinds():
                raise ProtocolError(
                    f"unknown session.type '{wanted}'", code="invalid_value", param="session.type"
                )
            if session.live:
                raise ProtocolError(
                    "session.type cannot change once the session is live; open a new connection",
                    param="session.type",
                )
            await session.close()
            if self._starting is not None:
                self._starting.cancel()
            session = session_kinds()[wanted](self)
            await session.update(update)
            self.session = session
            self._reply_after_start = True
            self._starting = asyncio.create_task(self._start(session))
            return
        await session.update(update)
        if session.live:
            self.send(event("session.updated", session=session.session_object()))
        else:
            self._reply_after_start = True  # answered right after session.created
