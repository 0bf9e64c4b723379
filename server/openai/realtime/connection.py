"""One realtime websocket: JSON framing, the ordered writer, errors, and the reader loop.

Everything the server sends goes through one queue and one writer task, so events keep the
order in which they were produced (the transcription session relies on that for "committed
before its transcript"). Client mistakes become `error` events and the socket stays usable;
when the client leaves, the session is closed at once and its resources freed.

The queue is bounded in bytes (`MAX_QUEUED_BYTES`): a client that stops reading while it
keeps sending (or while a long answer is spoken) would otherwise grow it without end. Past
the bound the client is dropped: its session is closed, what was queued is discarded and the
socket is closed with code 1008 and a reason that says why. Frames larger than
`OFF_LOOP_CHARS` are parsed on a worker thread, so a 15 MiB append never stalls other
connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import Any

from fastapi import WebSocket
from starlette.concurrency import run_in_threadpool
from starlette.websockets import WebSocketDisconnect, WebSocketState

from llamactl.realtime import protocol
from llamactl.realtime.errors import ProtocolError

from ...middleware import REALTIME_SUBPROTOCOL
from ...state import ServerState
from .session import RealtimeSession
from .wire import OFF_LOOP_CHARS, decode_event, encode_event

__all__ = ["MAX_EVENT_BYTES", "MAX_QUEUED_BYTES", "Connection", "LiveSessions"]

log = logging.getLogger("llamactl.server.openai.realtime")

MAX_EVENT_BYTES = 24 * 1024 * 1024
MAX_QUEUED_BYTES = 32 * 1024 * 1024  # server events a client may leave unread (~8 min of audio)
CLOSE_NOT_READING = 1008  # policy violation: the client does not read what it is sent
CLOSE_TRY_LATER = 1013
_CLOSE_TIMEOUT = 2.0


class LiveSessions:
    """The server's Realtime connections being served now (counted on the event loop)."""

    def __init__(self) -> None:
        self.count = 0


class Connection:
    """One socket; `kinds` (`session.type` -> session class) are the sessions it may serve.
    It is the sessions' `Socket`."""

    def __init__(self, ws: WebSocket, kinds: Mapping[str, type[RealtimeSession]]) -> None:
        self.ws = ws
        self.app = ws.app
        self.kinds = kinds
        self.session: RealtimeSession | None = None
        self._out: asyncio.Queue[str | None] = asyncio.Queue()
        self._queued = 0  # characters of the events in `_out`
        self._starting: asyncio.Task[None] | None = None
        self._reader: asyncio.Task[None] | None = None
        self._writer: asyncio.Task[None] | None = None
        self._reply_after_start = False
        self._closing = False
        self._dropped = False  # the client fell too far behind and is being dropped

    # ---------------------------------------------------------------- output
    def send(self, event: protocol.ServerEvent) -> None:
        """Queue a server event (event-loop thread only)."""
        if self._closing:
            return
        text = encode_event(event)
        if self._queued + len(text) > MAX_QUEUED_BYTES:
            self._drop_client()
            return
        self._queued += len(text)
        self._out.put_nowait(text)

    def _drop_client(self) -> None:
        """The client leaves events unread past the bound: stop serving it (see module doc)."""
        log.warning(
            "realtime client dropped: more than %d MiB of events unread",
            MAX_QUEUED_BYTES // (1024 * 1024),
        )
        self._closing = self._dropped = True
        while not self._out.empty():
            self._out.get_nowait()
        self._queued = 0
        for task in (self._writer, self._reader):
            if task is not None and task is not asyncio.current_task():
                task.cancel()

    def send_error(self, exc: ProtocolError, event_id: str | None = None) -> None:
        self.send(protocol.refusal(exc, event_id))

    def close_soon(self) -> None:
        """Close the socket after the events queued so far (fatal session errors)."""
        self._out.put_nowait(None)
        self._closing = True

    async def _write(self) -> None:
        while True:
            text = await self._out.get()
            if text is None:
                with contextlib.suppress(Exception):
                    await self.ws.close(code=1011)
                return
            self._queued -= len(text)
            try:
                await self.ws.send_text(text)
            except Exception:  # the client is gone; the reader will notice too
                return

    # ------------------------------------------------------------------ run
    async def run(self, kind: str) -> None:
        # a browser asks for "realtime" (OpenAI's subprotocol, beside the key it carries);
        # Chromium drops a socket whose handshake names none of those it asked for
        offered = self.ws.scope.get("subprotocols", ())
        chosen = REALTIME_SUBPROTOCOL if REALTIME_SUBPROTOCOL in offered else None
        await self.ws.accept(subprotocol=chosen)
        state: ServerState = self.app.state.llamactl
        limit = state.settings.realtime_max_sessions
        live = state.family_state(LiveSessions)
        if live.count >= limit:
            await self._refuse_busy(limit)
            return
        live.count += 1
        try:
            await self._serve(kind)
        finally:
            live.count -= 1

    async def _refuse_busy(self, limit: int) -> None:
        """Every session holds a stream and a share of the speech worker: past
        `realtime_max_sessions` a new one is told so and closed (1013, try again later)."""
        message = (
            f"the server already serves {limit} realtime sessions (realtime_max_sessions); "
            "try again later"
        )
        error = ProtocolError(message, type_="server_error", code="too_many_sessions")
        with contextlib.suppress(Exception):
            await self.ws.send_text(encode_event(protocol.refusal(error)))
            await asyncio.wait_for(
                self.ws.close(code=CLOSE_TRY_LATER, reason="too many realtime sessions"),
                timeout=_CLOSE_TIMEOUT,
            )

    async def _serve(self, kind: str) -> None:
        self._writer = writer = asyncio.create_task(self._write())
        try:
            self._open(kind)
            self._reader = asyncio.create_task(self._read())
            try:
                await self._reader
            except asyncio.CancelledError:
                if not self._dropped:
                    raise
        finally:
            if self._reader is not None and not self._reader.done():
                self._reader.cancel()  # the handler itself was cancelled (shutdown)
            if self._starting is not None and not self._starting.done():
                self._starting.cancel()
                with contextlib.suppress(BaseException):
                    await self._starting
            if self.session is not None:
                await self.session.close()
            if self._dropped:
                await self._close_dropped()
            else:
                self._closing = True
                self._out.put_nowait(None)
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(writer, timeout=5)

    async def _close_dropped(self) -> None:
        """Close a dropped client's socket; if it does not read even the close frame, give
        up after a moment and let the server tear the connection down."""
        mib = MAX_QUEUED_BYTES // (1024 * 1024)
        reason = f"client not reading: over {mib} MiB of events unread"
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(
                self.ws.close(code=CLOSE_NOT_READING, reason=reason), timeout=_CLOSE_TIMEOUT
            )

    def _open(self, kind: str) -> None:
        cls = self.kinds[kind]
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
            self.send(protocol.SessionCreated.build(session=session.session_object()))
            if self._reply_after_start:
                self._reply_after_start = False
                self.send(protocol.SessionUpdated.build(session=session.session_object()))

    async def _read(self) -> None:
        while not self._dropped:  # dropped while handling the last event: stop here
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
                if len(text) > OFF_LOOP_CHARS:
                    client_event = await run_in_threadpool(decode_event, text)
                else:
                    client_event = decode_event(text)
            except ProtocolError as exc:
                self.send_error(exc)
                continue
            # echoed in errors (a huge one would be sent back each time: dropped)
            event_id = protocol.ClientEvent.parse(client_event).event_id
            try:
                await self._dispatch(client_event)
            except ProtocolError as exc:
                self.send_error(exc, event_id)

    async def _dispatch(self, client_event: dict[str, Any]) -> None:
        type_ = client_event["type"]
        session = self.session
        assert session is not None
        if protocol.CLIENT_EVENTS.get(type_) is not protocol.SessionUpdate:
            await session.handle(type_, client_event)
            return
        update = protocol.SessionUpdate.parse(client_event).session
        wanted = update.get("type")
        if wanted is not None and wanted != session.kind:
            if wanted not in self.kinds:
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
            session = self.kinds[wanted](self)
            await session.update(update)
            self.session = session
            self._reply_after_start = True
            self._starting = asyncio.create_task(self._start(session))
            return
        await session.update(update)
        if session.live:
            self.send(protocol.SessionUpdated.build(session=session.session_object()))
        else:
            self._reply_after_start = True  # answered right after session.created
