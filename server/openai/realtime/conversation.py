"""Realtime conversation sessions (`session.type: "realtime"`): speech in, answers out.

The session keeps the conversation (GA items, in a `ConversationItems`), transcribes committed
user audio with the transcription session's stream (so commits, VAD and the "committed before
its transcript" order are the same), and answers with `Response`s run on the shared chat
engine: each response is one engine request, batched with every other session's, and sampled
from its own logits row, so concurrent sessions never mix outputs.

Turn taking: with `server_vad` the VAD commits each utterance and, with `create_response`,
a response starts at once (it waits for the transcript inside). With `interrupt_response`,
speech starting while a response is still being made or heard (by a real-time playback
clock started at its first audio delta) is a barge-in: the response is cancelled, the
output audio is cleared (`output_audio_buffer.cleared`) and the assistant item is cut back
to what was heard (`conversation.item.truncated`).

Stream events arrive on the speech worker's thread; they are queued and handled by one task,
in order, because a barge-in has to wait for the cancelled response's `response.done`.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import time
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.concurrency import run_in_threadpool

from llamactl import (
    EMBEDDED_ALIASES,
    Cleared,
    Committed,
    Completed,
    Final,
    InvalidRequestError,
    LlamactlError,
    ProtocolError,
    SpeechStarted,
    SpeechStopped,
    StreamEvent,
    StreamFailed,
    Tentative,
)
from llamactl.realtime import protocol
from llamactl.realtime.protocol import new_id

from ...speech.synthesis import synthesizer
from ..voices import openai_voice
from .conversation_config import (
    OutputConfig,
    RealtimeConfig,
    apply_audio_output,
    apply_output,
    merge,
    new_config,
)
from .items import ConversationItems, Item, chat_messages, cut
from .response import Response, chat_request
from .session import Socket
from .speculation import Speculation
from .transcription import TranscriptionSession, check_semantic
from .wire import OFF_LOOP_CHARS

MAX_ACTIVE_RESPONSES = 4  # out-of-band ones included: one session cannot fill the engine queue


class ConversationSession(TranscriptionSession):
    kind = "realtime"
    offers_tentative = True

    def __init__(self, conn: Socket) -> None:
        super().__init__(conn)
        self.state = conn.app.state.llamactl
        self.rt: RealtimeConfig = new_config(self.state.model_id, "")
        self.config = self.rt.input
        self.items = ConversationItems()
        self.responses: list[Response] = []
        self._queue: asyncio.Queue[StreamEvent] = asyncio.Queue()
        self._pump: asyncio.Task[None] | None = None
        self._items_by_stream: dict[int, Item] = {}
        self._commits_asked = 0  # manual commits sent by the client
        self._commits_made = 0  # ... and the ones whose item exists
        self._caught_up = asyncio.Event()
        self._caught_up.set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._pending_item_audio = 0.0  # seconds of created items' audio not yet transcribed
        self.speculation = Speculation(self.state)  # an answer started during the silence

    # ------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        state = self.state
        if state.chat is None:
            raise ProtocolError(
                "conversation sessions need a chat model: "
                + (state.load_error or "this server's model cannot chat (or is still loading)"),
                type_="server_error",
                code="model_unavailable",
            )
        await super().start()
        if self.live:
            self._pump = asyncio.create_task(self._run_events())

    async def close(self) -> None:
        self.speculation.cancel()
        self._caught_up.set()
        for response in list(self.responses):
            if response.active:
                await response.cancel("client_cancelled")
        if self._pump is not None:
            self._pump.cancel()
        for task in list(self._tasks):
            task.cancel()
        await super().close()

    def session_object(self) -> dict[str, Any]:
        self.rt.input = self.config
        return self.rt.to_session(self.id)

    async def update(self, session: dict[str, Any]) -> None:
        names = set(EMBEDDED_ALIASES)
        if self.config.model:
            names.add(self.config.model)
        s = self.state
        models = {s.model_id, s.model_path.name, s.model_path.stem}
        if isinstance(session.get("model"), str) and session["model"].startswith("gpt-"):
            models.add(session["model"])  # OpenAI's realtime model names mean this model
        self.rt.input = self.config
        new = merge(self.rt, session, names, models)
        await check_semantic(new.input)
        if new.output.voice != self.rt.output.voice:
            await self._check_voice(new.output.voice, "session.audio.output.voice")
        if new.input.language is not None and self._service.loaded:
            try:
                new.input.language = self._service.transcriber.check_language(new.input.language)
            except InvalidRequestError as exc:
                raise ProtocolError(
                    str(exc), param="session.audio.input.transcription.language"
                ) from exc
        self.rt = new
        self.config = new.input
        self._configure()

    async def _check_voice(self, voice: str, param: str) -> None:
        def check() -> None:
            synth = synthesizer(self.conn.app)
            chunks = synth.synthesize("", voice=openai_voice(voice))
            close = getattr(chunks, "close", None)
            if close is not None:
                close()

        try:
            await run_in_threadpool(check)
        except InvalidRequestError as exc:
            raise ProtocolError(f"unknown voice '{voice}': {exc}", param=param) from exc
        except LlamactlError as exc:
            raise ProtocolError(str(exc), type_="server_error", code="tts_unavailable") from exc

    # ---------------------------------------------------------- client events
    async def handle(self, type_: str, client_event: dict[str, Any]) -> None:
        if type_.startswith("input_audio_buffer."):
            await super().handle(type_, client_event)
            if protocol.CLIENT_EVENTS.get(type_) is protocol.InputAudioBufferCommit:
                self._commits_asked += 1
                self._caught_up.clear()
            return
        handlers: dict[type[protocol.ClientEvent], Callable[[dict[str, Any]], Awaitable[None]]]
        handlers = {
            protocol.ConversationItemCreate: self._item_create,
            protocol.ConversationItemDelete: self._item_delete,
            protocol.ConversationItemRetrieve: self._item_retrieve,
            protocol.ConversationItemTruncate: self._item_truncate,
            protocol.ResponseCreate: self._response_create,
            protocol.ResponseCancel: self._response_cancel,
            protocol.OutputAudioBufferClear: self._output_clear,
        }
        kind = protocol.CLIENT_EVENTS.get(type_)
        handler = handlers.get(kind) if kind is not None else None
        if handler is None:
            raise ProtocolError(
                f"'{type_}' is not a client event of realtime sessions",
                code="unknown_event",
                param="type",
            )
        if not self.live:
            raise ProtocolError(
                f"{type_} before session.created: wait for session.created",
                code="session_not_ready",
            )
        # A commit's item appears once the stream reaches the commit; events sent after the
        # commit (response.create above all) must see it, so they wait for it in order.
        await self._caught_up.wait()
        await handler(client_event)

    # ------------------------------------------------------- conversation items
    async def _item_create(self, raw: dict[str, Any]) -> None:
        ev = protocol.ConversationItemCreate.parse(raw)
        previous = ev.previous_item_id
        if previous not in (None, "root"):
            self.items.index(previous)
        data, encoded = self._parse_item(ev.item)
        audio = await _decode_parts(encoded)
        chars = sum(len(p.get("text") or p.get("transcript") or "") for p in data["content"])
        self.items.check_client_text(chars)
        seconds = sum(len(pcm) for _, pcm in audio) / 2 / self.config.rate
        self._reserve_item_audio(seconds)
        item = Item(data)
        item.client_chars = chars
        if not audio:
            item.transcribed.set_result(0.0)
        try:
            after = self.items.insert(item, previous)
        except ProtocolError:
            self._pending_item_audio -= seconds
            raise
        self.conn.send(protocol.ConversationItemAdded.build(previous_item_id=after, item=data))
        if audio:
            self._spawn(self._transcribe_item(item, audio, seconds))
        else:
            self.conn.send(protocol.ConversationItemDone.build(previous_item_id=after, item=data))

    def _parse_item(self, new: protocol.NewItem) -> tuple[dict[str, Any], list[tuple[int, Any]]]:
        """The item in the GA shape (audio data dropped) and any input audio to transcribe,
        still base64 (see `_decode_parts`)."""
        item_id = new.id or new_id("item_")
        if any(i.id == item_id for i in self.items):
            raise ProtocolError(
                f"an item with id '{item_id}' already exists", code="item_exists", param="item.id"
            )
        content: list[dict[str, Any]] = []
        audio: list[tuple[int, Any]] = []
        for part in new.content:
            if part.type == "input_audio" and "audio" in part.model_fields_set:
                audio.append((len(content), part.audio))
                content.append({"type": "input_audio", "transcript": None})
            elif part.type in ("input_audio", "output_audio"):
                content.append({"type": part.type, "transcript": part.transcript})
            else:
                kind = "output_text" if part.type == "text" else part.type
                content.append({"type": kind, "text": part.text})
        role = new.role
        data = {
            "id": item_id,
            "object": "realtime.item",
            "type": "message",
            "role": role,
            "status": "completed",
            "content": content,
        }
        return data, audio

    def _reserve_item_audio(self, seconds: float) -> None:
        """Created items' audio waits for the worker like appended audio does, under the same
        bound (`realtime_max_buffer_seconds`): otherwise a client creating items faster than
        they are transcribed would hold any amount of audio."""
        limit = self._max_buffered_seconds
        if seconds and limit is not None and self._pending_item_audio + seconds > limit:
            raise ProtocolError(
                f"{self._pending_item_audio:.0f} s of created items' audio are waiting to be "
                f"transcribed and this item adds {seconds:.0f} s, over the {limit:g} s a "
                "session may hold (realtime_max_buffer_seconds); wait for their "
                "transcriptions",
                code="input_audio_buffer_full",
                param="item.content",
            )
        self._pending_item_audio += seconds

    async def _transcribe_item(
        self, item: Item, audio: list[tuple[int, bytes]], seconds: float
    ) -> None:
        """Transcribe the input_audio parts of a created item (whole, not streamed)."""
        t0 = time.monotonic()
        loop = asyncio.get_running_loop()
        try:
            for index, pcm in audio:
                done: asyncio.Future[list[str]] = loop.create_future()
                texts: list[str] = []

                def deliver(seg: Any, texts=texts, done=done) -> None:
                    def on_loop() -> None:
                        if done.done():
                            return
                        if seg is None:
                            done.set_result(texts)
                        elif isinstance(seg, BaseException):
                            done.set_exception(seg)
                        else:
                            texts.append(seg.text.strip())

                    with contextlib.suppress(RuntimeError):
                        loop.call_soon_threadsafe(on_loop)

                handle = await run_in_threadpool(
                    self._service.submit,
                    pcm,
                    self.config.rate,
                    deliver,
                    language=self.config.language,
                )
                try:
                    transcript = " ".join(t for t in await done if t)
                finally:
                    handle.cancel()
                item.data["content"][index]["transcript"] = transcript
                self.conn.send(
                    protocol.InputTranscriptionCompleted.build(
                        item_id=item.id,
                        content_index=index,
                        transcript=transcript,
                        usage={
                            "type": "duration",
                            "seconds": round(len(pcm) / 2 / self.config.rate, 3),
                        },
                    )
                )
        except Exception as exc:
            self.conn.send(
                protocol.InputTranscriptionFailed.build(
                    item_id=item.id,
                    content_index=0,
                    error={
                        "type": "server_error",
                        "code": "transcription_failed",
                        "message": str(exc),
                    },
                )
            )
        finally:
            self._pending_item_audio -= seconds
            if not item.transcribed.done():
                item.transcribed.set_result((time.monotonic() - t0) * 1000)
            self.conn.send(
                protocol.ConversationItemDone.build(
                    previous_item_id=self.items.previous_of(item.id), item=item.data
                )
            )

    async def _item_delete(self, raw: dict[str, Any]) -> None:
        item = self.items.delete(protocol.ConversationItemDelete.parse(raw).item_id)
        self.conn.send(protocol.ConversationItemDeleted.build(item_id=item.id))

    async def _item_retrieve(self, raw: dict[str, Any]) -> None:
        item = self.items.get(protocol.ConversationItemRetrieve.parse(raw).item_id)
        self.conn.send(protocol.ConversationItemRetrieved.build(item=item.data))

    async def _item_truncate(self, raw: dict[str, Any]) -> None:
        ev = protocol.ConversationItemTruncate.parse(raw)
        item = self.items.truncate(ev.item_id, ev.audio_end_ms)
        self._send_truncated(item, ev.audio_end_ms)

    def _send_truncated(self, item: Item, audio_end_ms: int) -> None:
        self.conn.send(
            protocol.ConversationItemTruncated.build(
                item_id=item.id, content_index=0, audio_end_ms=audio_end_ms
            )
        )

    # -------------------------------------------------------------- responses
    def _active(self) -> Response | None:
        for r in self.responses:
            if r.active and r.in_conversation:
                return r
        return None

    async def _response_create(self, raw: dict[str, Any]) -> None:
        params = protocol.ResponseCreate.parse(raw).response
        out = copy.deepcopy(self.rt.output)
        apply_output(out, params)
        if params.audio is not None:
            apply_audio_output(out, params.audio.output)
            if out.voice != self.rt.output.voice:
                await self._check_voice(out.voice, "response.audio.output.voice")
        in_conversation = params.conversation != "none"
        metadata = dict(params.metadata) if params.metadata is not None else None
        inputs = self._response_inputs(params.input)
        if in_conversation and self._active() is not None:
            raise ProtocolError(
                "the conversation already has an active response; cancel it or wait for "
                "response.done",
                code="conversation_already_has_active_response",
            )
        if sum(r.active for r in self.responses) >= MAX_ACTIVE_RESPONSES:
            raise ProtocolError(
                f"a session runs at most {MAX_ACTIVE_RESPONSES} responses at once; wait for "
                "a response.done",
                code="too_many_active_responses",
            )
        self._respond(out, in_conversation, inputs, metadata)

    def _response_inputs(
        self, value: list[protocol.NewItem | protocol.ItemReference] | None
    ) -> list[Item] | None:
        if value is None:
            return None
        out: list[Item] = []
        for n, given in enumerate(value):
            if isinstance(given, protocol.ItemReference):
                out.append(self.items.get(given.id))
                continue
            data, audio = self._parse_item(given)
            if audio:
                raise ProtocolError(
                    "input_audio in response.input needs a transcript; add audio items to the "
                    "conversation with conversation.item.create",
                    param=f"response.input[{n}]",
                )
            item = Item(data)
            item.transcribed.set_result(0.0)
            out.append(item)
        return out

    def _respond(
        self,
        out: OutputConfig,
        in_conversation: bool = True,
        inputs: list[Item] | None = None,
        metadata: dict[str, str] | None = None,
    ) -> Response:
        def items() -> list[Item]:
            return list(self.items) if inputs is None else inputs

        async def wait_inputs() -> float | None:
            waited = [i for i in items() if not i.transcribed.done()]
            if waited:
                await asyncio.gather(*(i.transcribed for i in waited))
            users = [i for i in items() if i.data["role"] == "user"]
            last = users[-1] if users else None
            if last is not None and any(p["type"] == "input_audio" for p in last.data["content"]):
                return last.transcribed.result()
            return None

        def add_item(data: dict[str, Any]) -> str | None:
            item = Item(data)
            item.transcribed.set_result(0.0)  # nothing to wait for in an answer
            return self.items.insert(item)

        response: Response

        def finish_item(data: dict[str, Any]) -> str | None:
            return self.items.finish(data, response.speaker)

        response = Response(
            state=self.state,
            synth=lambda: synthesizer(self.conn.app),
            send=self.conn.send,
            out=out,
            messages=lambda: chat_messages(out.instructions, items()),
            in_conversation=in_conversation,
            add_item=add_item,
            finish_item=finish_item,
            wait_inputs=wait_inputs,
            metadata=metadata,
            adopt=self.speculation.take,
        )
        self.responses = [r for r in self.responses if r.active or r.playing(time.monotonic())]
        self.responses.append(response)
        response.start()
        return response

    async def _respond_after(self, active: Response | None) -> None:
        """A VAD turn's response, once the conversation's active one (if any) is done."""
        if active is not None and active.task is not None:
            with contextlib.suppress(BaseException):
                await asyncio.shield(active.task)
        if not self._closed and self._active() is None:
            self._respond(copy.deepcopy(self.rt.output))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _response_cancel(self, raw: dict[str, Any]) -> None:
        wanted = protocol.ResponseCancel.parse(raw).response_id
        target = None
        for r in self.responses:
            if r.active and (r.id == wanted if wanted else r.in_conversation):
                target = r
        if target is None:
            raise ProtocolError(
                "there is no active response to cancel"
                + (f" with id '{wanted}'" if wanted else ""),
                code="response_cancel_not_active",
            )
        await target.cancel("client_cancelled")

    async def _output_clear(self, ev: dict[str, Any]) -> None:
        await self._interrupt("client_cancelled")

    async def _interrupt(self, reason: str) -> bool:
        """Barge-in: stop what is being said, clear the output audio, keep what was heard."""
        now = time.monotonic()
        playing = [r for r in self.responses if r.playing(now) or (r.active and r.in_conversation)]
        for r in playing:
            heard = r.heard_ms(now)
            if r.active:
                await r.cancel(reason)
            if r.audio:
                self.conn.send(protocol.OutputAudioBufferCleared.build(response_id=r.id))
            if r.audio and r.in_conversation and r.speaker is not None:
                item = self.items.find(r.item_id)
                if item is not None:
                    end = min(heard, int(r.speaker.seconds * 1000))
                    cut(item, end)
                    self._send_truncated(item, end)
        return bool(playing)

    # ---------------------------------------------------------- stream events
    def _on_event(self, ev: StreamEvent) -> None:
        if not self._closed:
            self._queue.put_nowait(ev)

    async def _run_events(self) -> None:
        while True:
            ev = await self._queue.get()
            try:
                await self._handle_stream_event(ev)
            except ProtocolError as exc:
                self.conn.send_error(exc)

    def _speculate(self, ev: Tentative) -> None:
        """Start the answer this turn gets if it ends in the silence it has gone quiet in;
        only where the turn's end will start an answer by itself and nothing else would."""
        if (
            not ev.text
            or self.config.turn_detection is None
            or not self.rt.create_response
            or self._active() is not None
            or not self.state.ready
        ):
            self.speculation.cancel()
            return
        heard = Item({"type": "message", "role": "user", "content": [{"type": "input_audio"}]})
        heard.data["content"][0]["transcript"] = ev.text
        out = self.rt.output
        try:
            request = chat_request(
                self.state, out, chat_messages(out.instructions, [*self.items, heard])
            )
        except Exception:  # optional work: the turn's own response meets and reports it
            self.speculation.cancel()
            return
        self.speculation.start(request)

    async def _handle_stream_event(self, ev: StreamEvent) -> None:
        if isinstance(ev, Tentative):
            self._speculate(ev)
        elif isinstance(ev, SpeechStarted):
            self.speculation.cancel()
            super()._on_event(ev)
            if self.config.turn_detection is not None and self.rt.interrupt_response:
                await self._interrupt("turn_detected")
        elif isinstance(ev, Committed):
            item_id = self._item_id(ev.item)
            data = {
                "id": item_id,
                "object": "realtime.item",
                "type": "message",
                "role": "user",
                "status": "completed",
                "content": [{"type": "input_audio", "transcript": None}],
            }
            item = Item(data)
            previous = self.items.insert(item)
            self._previous = previous
            if not ev.auto:
                self._commits_made += 1
                if self._commits_made >= self._commits_asked:
                    self._caught_up.set()
            super()._on_event(ev)  # input_audio_buffer.committed, then any held deltas
            self.conn.send(
                protocol.ConversationItemAdded.build(previous_item_id=previous, item=data)
            )
            self._items_by_stream[ev.item] = item
            if ev.auto and self.rt.create_response:
                # not awaited here: the active response may be waiting for a transcript that
                # only this loop can deliver
                self._spawn(self._respond_after(self._active()))
        elif isinstance(ev, Completed):
            heard = self._items_by_stream.pop(ev.item, None)
            super()._on_event(ev)
            if heard is not None:
                heard.data["content"][0]["transcript"] = ev.transcript
                if not heard.transcribed.done():
                    heard.transcribed.set_result((time.monotonic() - heard.committed_at) * 1000)
                if self.items.holds(heard):
                    self.conn.send(
                        protocol.ConversationItemDone.build(
                            previous_item_id=self.items.previous_of(heard.id), item=heard.data
                        )
                    )
        elif isinstance(ev, (SpeechStopped, Final, Cleared, StreamFailed)):
            if isinstance(ev, (Cleared, StreamFailed)):
                self.speculation.cancel()
            if isinstance(ev, StreamFailed):
                self._caught_up.set()
            super()._on_event(ev)


async def _decode_parts(encoded: list[tuple[int, Any]]) -> list[tuple[int, bytes]]:
    """Decode items' base64 audio; megabytes of it on a worker thread, not the event loop."""

    def decode() -> list[tuple[int, bytes]]:
        return [(index, protocol.decode_audio(audio)) for index, audio in encoded]

    size = sum(len(audio) for _, audio in encoded if isinstance(audio, str))
    return await run_in_threadpool(decode) if size > OFF_LOOP_CHARS else decode()


__all__ = ["ConversationSession"]
