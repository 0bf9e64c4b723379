"""Realtime transcription sessions: `input_audio_buffer.*` in, transcripts out.

Each session owns one `TranscriptionStream` for its whole life (the "slot"); the stream is
opened before `session.created`, so an append can never find it missing, and closed the
moment the socket ends. The stream's events arrive on the worker thread and are moved onto
the event loop in order. Its transcript of an item can be ready before the item is
committed (the stream reads speech as it ends); those deltas wait here until the item's
`input_audio_buffer.committed` has gone out, so `committed` always precedes them.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, ClassVar

from starlette.concurrency import run_in_threadpool

from llamactl import (
    EMBEDDED_ALIASES,
    BufferFullError,
    Cleared,
    Committed,
    Completed,
    Final,
    InvalidRequestError,
    LlamactlError,
    ModelNotFoundError,
    ProtocolError,
    SmartTurn,
    SpeechStarted,
    SpeechStopped,
    StreamEvent,
    StreamFailed,
    TranscriptionStream,
)
from llamactl.realtime import protocol
from llamactl.realtime.protocol import new_id

from ...speech.transcription import audio_service
from ...state import ServerState
from .session import RealtimeSession, Socket
from .transcription_config import TranscriptionConfig, merge
from .wire import OFF_LOOP_CHARS

__all__ = ["TranscriptionSession", "check_semantic"]

# the client events of a transcription session
_AUDIO_EVENTS: tuple[type[protocol.ClientEvent], ...] = (
    protocol.InputAudioBufferAppend,
    protocol.InputAudioBufferCommit,
    protocol.InputAudioBufferClear,
)


class TranscriptionSession(RealtimeSession):
    kind = "transcription"
    # the stream offers a quiet turn's transcript before the turn ends (see speculation.py)
    offers_tentative: ClassVar[bool] = False

    def __init__(self, conn: Socket) -> None:
        super().__init__(conn)
        self.id = new_id("sess_")
        self._service = audio_service(conn.app)
        self.config = TranscriptionConfig(model="")
        self._stream: TranscriptionStream | None = None
        self._loop = asyncio.get_running_loop()
        self._ids: dict[int, str] = {}
        self._committed: set[int] = set()
        self._held: dict[int, list[protocol.ServerEvent]] = {}
        self._previous: str | None = None
        self._closed = False
        state: ServerState = conn.app.state.llamactl
        self._max_buffered_seconds = state.settings.realtime_max_buffer_seconds

    # ------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        try:
            transcriber = await run_in_threadpool(lambda: self._service.transcriber)
        except (LlamactlError, RuntimeError) as exc:
            raise ProtocolError(
                f"the speech model is unavailable: {exc}",
                type_="server_error",
                code="model_unavailable",
            ) from exc
        self.config.model = transcriber.name
        try:
            self.config.language = transcriber.check_language(self.config.language)
        except InvalidRequestError as exc:  # set by an update sent before the model loaded
            self.config.language = None
            self.conn.send_error(
                ProtocolError(str(exc), param="session.audio.input.transcription.language")
            )
        if self._closed:
            return
        try:
            stream = await run_in_threadpool(self._open_stream)
        except ModelNotFoundError as exc:  # Smart Turn went missing since the update
            raise _no_smart_turn(exc) from exc
        if self._closed:  # the client left while the stream was being opened
            stream.close()
            return
        self._stream = stream
        self._configure()
        self.live = True

    def _open_stream(self) -> TranscriptionStream:
        c = self.config
        return self._service.open_stream(
            sink=self._from_worker,
            language=c.language,
            prompt=c.prompt or None,
            vad=c.vad(),
            turn_detection=c.turn_detection is not None,
            semantic=c.semantic(),
            partials=False,
            tentative=self.offers_tentative,
            input_rate=c.rate,
            max_buffered_seconds=self._max_buffered_seconds,
        )

    def _configure(self) -> None:
        c, stream = self.config, self._stream
        if stream is None:
            return
        stream.configure(
            vad=c.vad(),
            turn_detection=c.turn_detection is not None,
            semantic=c.semantic(),
            language=c.language or "",
            prompt=c.prompt,
        )
        stream.input_rate = c.rate

    async def close(self) -> None:
        self._closed = True
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.close()
        self._held.clear()

    def session_object(self) -> dict[str, Any]:
        return self.config.to_session(self.id)

    async def update(self, session: dict[str, Any]) -> None:
        names = set(EMBEDDED_ALIASES)
        if self.config.model:
            names.add(self.config.model)
        new = merge(self.config, session, names)
        await check_semantic(new)
        if new.language is not None and self._service.loaded:
            try:
                new.language = self._service.transcriber.check_language(new.language)
            except InvalidRequestError as exc:
                raise ProtocolError(
                    str(exc), param="session.audio.input.transcription.language"
                ) from exc
        self.config = new
        self._configure()

    # ---------------------------------------------------------- client events
    async def handle(self, type_: str, client_event: dict[str, Any]) -> None:
        kind = protocol.CLIENT_EVENTS.get(type_)
        if kind not in _AUDIO_EVENTS:
            raise ProtocolError(
                f"'{type_}' is not a client event of transcription sessions (they take "
                "session.update and input_audio_buffer.append / commit / clear)",
                code="unknown_event",
                param="type",
            )
        stream = self._stream
        if not self.live or stream is None:
            raise ProtocolError(
                f"{type_} before session.created: the session is not live yet; wait for "
                "session.created",
                code="session_not_ready",
            )
        try:
            if kind is protocol.InputAudioBufferAppend:
                audio = protocol.InputAudioBufferAppend.parse(client_event).audio
                rate = self.config.rate
                if len(audio) > OFF_LOOP_CHARS:
                    # decoding and resampling megabytes takes a while: not on the event loop
                    await run_in_threadpool(_append, stream, audio, rate)
                else:
                    _append(stream, audio, rate)
            elif kind is protocol.InputAudioBufferCommit:
                stream.commit()
            else:
                stream.clear()
                self.conn.send(protocol.InputAudioBufferCleared.build())
        except ProtocolError:
            raise  # refused already, with its own code
        except BufferFullError as exc:
            raise ProtocolError(str(exc), code="input_audio_buffer_full", param="audio") from exc
        except InvalidRequestError as exc:
            raise ProtocolError(str(exc), param="audio") from exc
        except LlamactlError as exc:  # the stream failed or closed under us
            raise ProtocolError(str(exc), type_="server_error", code="session_closed") from exc

    # ---------------------------------------------------------- stream events
    def _from_worker(self, ev: StreamEvent) -> None:
        """Called on the worker thread under the stream's lock: hand over, never block."""
        with contextlib.suppress(RuntimeError):  # loop closed: the session is gone
            self._loop.call_soon_threadsafe(self._on_event, ev)

    def _item_id(self, item: int) -> str:
        if item not in self._ids:
            self._ids[item] = new_id("item_")
        return self._ids[item]

    def _on_event(self, ev: StreamEvent) -> None:
        if self._closed:
            return
        vad_on = self.config.turn_detection is not None
        if isinstance(ev, SpeechStarted):
            if vad_on:
                self.conn.send(
                    protocol.SpeechStarted.build(
                        audio_start_ms=int(ev.position * 1000),
                        item_id=self._item_id(ev.item),
                    )
                )
        elif isinstance(ev, SpeechStopped):
            if vad_on:
                self.conn.send(
                    protocol.SpeechStopped.build(
                        audio_end_ms=int(ev.position * 1000),
                        item_id=self._item_id(ev.item),
                    )
                )
        elif isinstance(ev, Committed):
            item_id = self._item_id(ev.item)
            self.conn.send(
                protocol.InputAudioBufferCommitted.build(
                    previous_item_id=self._previous,
                    item_id=item_id,
                    # llamactl extension: where the item's audio starts and ends
                    audio_start_ms=int(ev.start * 1000),
                    audio_end_ms=int(ev.position * 1000),
                )
            )
            self._previous = item_id
            self._committed.add(ev.item)
            for held in self._held.pop(ev.item, []):
                self.conn.send(held)
        elif isinstance(ev, Final):
            delta = protocol.InputTranscriptionDelta.build(
                item_id=self._item_id(ev.item),
                content_index=0,
                delta=ev.delta,
            )
            if ev.item in self._committed:
                self.conn.send(delta)
            else:
                self._held.setdefault(ev.item, []).append(delta)
        elif isinstance(ev, Completed):
            self.conn.send(
                protocol.InputTranscriptionCompleted.build(
                    item_id=self._item_id(ev.item),
                    content_index=0,
                    transcript=ev.transcript,
                    usage={"type": "duration", "seconds": round(ev.duration, 3)},
                )
            )
            self._committed.discard(ev.item)
            self._ids.pop(ev.item, None)
        elif isinstance(ev, Cleared):
            self._held.pop(ev.item, None)
            self._ids.pop(ev.item, None)
        elif isinstance(ev, StreamFailed):
            self.conn.send_error(
                ProtocolError(ev.message, type_="server_error", code="transcription_failed")
            )
            self.conn.close_soon()


async def check_semantic(config: TranscriptionConfig) -> None:
    """Refuse `semantic_vad` (the update changes nothing) when Smart Turn is not installed;
    loading it here, off the loop, also makes switching the live stream cheap."""
    if config.semantic() is None:
        return
    try:
        await run_in_threadpool(SmartTurn)
    except ModelNotFoundError as exc:
        raise _no_smart_turn(exc) from exc


def _no_smart_turn(exc: ModelNotFoundError) -> ProtocolError:
    return ProtocolError(
        str(exc), code="model_not_found", param="session.audio.input.turn_detection.type"
    )


def _append(stream: TranscriptionStream, audio: str, rate: int) -> None:
    stream.append(protocol.decode_audio(audio), rate=rate)
