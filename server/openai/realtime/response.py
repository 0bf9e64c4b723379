"""One realtime response: the chat engine's answer as GA Realtime events, spoken or written.

Order of events (audio; text swaps the audio/transcript events for `response.output_text.*`):
`response.created`, then (once the user's audio items are transcribed)
`response.output_item.added`, `conversation.item.added`, `response.content_part.added`,
`response.output_audio_transcript.delta` and `response.output_audio.delta` as text and
speech are made, `response.output_audio.done`, `response.output_audio_transcript.done`,
`response.content_part.done`, `response.output_item.done`, `conversation.item.done`,
`response.done`. Reasoning is never spoken or written into the item: it goes out as
`response.reasoning.delta` (a llamactl extension) and can be ended early through
`POST /v1/chat/completions/control` with this response's id.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from llamactl import (
    ChatRequest,
    ChatStream,
    ContentDelta,
    Done,
    LlamactlError,
    ReasoningDelta,
    RepetitionGuard,
    ToolCallDelta,
)
from llamactl.realtime import protocol
from llamactl.realtime.protocol import new_id

from ...common import sampling_params
from ...state import ServerState
from ..chat import serving as chat_serving
from ..voices import openai_voice
from .conversation_config import OutputConfig
from .speaker import Speaker

log = logging.getLogger("llamactl.server.openai.realtime")

URGENT_TOKENS = 16  # a spoken answer's first clause, and a little more
STATUS_REASONS = {"turn_detected", "client_cancelled"}


class Response:
    """Created by the session; `run()` is its whole life, `cancel()` ends it early."""

    def __init__(
        self,
        *,
        state: ServerState,
        synth: Callable[[], Any],
        send: Callable[[protocol.ServerEvent], None],
        out: OutputConfig,
        messages: Callable[[], list[dict[str, Any]]],
        in_conversation: bool,
        add_item: Callable[[dict[str, Any]], str | None],
        finish_item: Callable[[dict[str, Any]], str | None],
        wait_inputs: Callable[[], Awaitable[float | None]],
        metadata: dict[str, str] | None,
        adopt: Callable[[ChatRequest], ChatStream | None] | None = None,
    ) -> None:
        self.id = new_id("resp_")
        self.item_id = new_id("item_")
        self.state = state
        self._synth = synth
        self._send = send
        self.out = out
        self._messages = messages
        self.in_conversation = in_conversation
        self._add_item = add_item
        self._finish_item = finish_item
        self._wait_inputs = wait_inputs
        self._adopt = adopt  # an answer to the same request started during the silence
        self.speculated = False  # this answer was started before its turn ended
        self.client_metadata = dict(metadata or {})
        self.audio = out.modalities == ["audio"]
        self.status = "in_progress"
        self.reason: str | None = None
        self.looping = False  # the loop guard ended the answer (status incomplete, repetition)
        self.error: dict[str, Any] | None = None
        self.text = ""
        self.chat: ChatStream | None = None
        self.speaker: Speaker | None = None
        self.usage: dict[str, Any] | None = None
        self.created_at = time.monotonic()
        self.chat_started_at: float | None = None
        self.first_text_at: float | None = None
        self.first_audio_at: float | None = None
        self.transcription_ms: float | None = None
        self.item: dict[str, Any] | None = None
        self._cancel = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------ control
    @property
    def active(self) -> bool:
        return self.task is not None and not self.task.done()

    def playing(self, now: float) -> bool:
        """Is the listener (by a real-time playback clock) still hearing this response?"""
        if not self.audio:
            return False
        if self.active:
            return True
        if self.first_audio_at is None or self.speaker is None:
            return False
        return now - self.first_audio_at < self.speaker.seconds

    def heard_ms(self, now: float) -> int:
        if self.first_audio_at is None or self.speaker is None:
            return 0
        return int(min(self.speaker.seconds, now - self.first_audio_at) * 1000)

    async def cancel(self, reason: str) -> None:
        """End now (`response.done` with status `cancelled`) and wait for it."""
        if self.active and self.reason is None:
            self.reason = reason
            self._cancel.set()
            if self.chat is not None:
                self.chat.cancel()
            if self.speaker is not None:
                await self.speaker.cancel()
        if self.task is not None:
            with contextlib.suppress(BaseException):
                await asyncio.shield(self.task)

    def start(self) -> None:
        self.task = asyncio.create_task(self.run())

    # ------------------------------------------------------------- events
    def _part_fields(self) -> dict[str, Any]:
        return {
            "response_id": self.id,
            "item_id": self.item_id,
            "output_index": 0,
            "content_index": 0,
        }

    def response_object(self) -> dict[str, Any]:
        out = self.out
        return {
            "object": "realtime.response",
            "id": self.id,
            "status": self.status,
            "status_details": self._status_details(),
            "output": [self.item] if self.item is not None else [],
            "conversation_id": "conv_default" if self.in_conversation else None,
            "output_modalities": list(out.modalities),
            "max_output_tokens": "inf" if out.max_output_tokens is None else out.max_output_tokens,
            "audio": {
                "output": {
                    "format": {"type": "audio/pcm", "rate": out.rate},
                    "voice": out.voice,
                }
            },
            "usage": self.usage,
            "metadata": self._metadata(),
        }

    def _status_details(self) -> dict[str, Any] | None:
        if self.status == "in_progress":
            return None
        details: dict[str, Any] = {"type": self.status}
        if self.reason is not None:
            details["reason"] = self.reason
        if self.error is not None:
            details["error"] = self.error
        return details

    def _metadata(self) -> dict[str, str] | None:
        meta = dict(self.client_metadata)

        def ms(at: float | None) -> str | None:
            return None if at is None else str(round((at - self.created_at) * 1000))

        latency = {
            "transcription_ms": None
            if self.transcription_ms is None
            else str(round(self.transcription_ms)),
            "first_text_ms": ms(self.first_text_at),
            "first_audio_ms": ms(self.first_audio_at),
            "speculated": "true" if self.speculated else None,
        }
        meta.update({k: v for k, v in latency.items() if v is not None})
        return meta or None

    def _new_item(self, status: str) -> dict[str, Any]:
        content: dict[str, Any]
        if self.audio:
            content = {"type": "output_audio", "transcript": self.text}
        else:
            content = {"type": "output_text", "text": self.text}
        return {
            "id": self.item_id,
            "object": "realtime.item",
            "type": "message",
            "role": "assistant",
            "status": status,
            "content": [content] if status != "in_progress" else [],
        }

    # ---------------------------------------------------------------- run
    async def run(self) -> None:
        self._send(protocol.ResponseCreated.build(response=self.response_object()))
        try:
            await self._generate()
        except Exception as exc:
            log.exception("realtime response failed")
            if self.status == "in_progress":
                self.status = "failed"
                self.error = {
                    "type": "server_error",
                    "code": "response_failed",
                    "message": str(exc),
                }
        finally:
            if self.speaker is not None and self.status != "completed":
                await self.speaker.cancel()
            if self.chat is not None:
                self.chat.cancel()
                self.state.unregister(self.id, self.chat)
            if self.status == "in_progress":
                self.status = "cancelled" if self.reason else "failed"
            self._close_item()
            self._record_stages()
            self._send(protocol.ResponseDone.build(response=self.response_object()))

    def _record_stages(self) -> None:
        """The answer's stages, for /metrics (llamactl.engine.cores): the engine's answer up
        to its first text (prompt, or what an answer started ahead had left), and the first
        clause's synthesis up to its first audio."""
        cores, started = self.state.cores, self.chat_started_at
        if started is None or self.first_text_at is None:
            return
        cores.record("llm_first_text", wait=0.0, seconds=self.first_text_at - started)
        if self.first_audio_at is not None:
            cores.record(
                "tts_first_audio", wait=0.0, seconds=self.first_audio_at - self.first_text_at
            )

    async def _generate(self) -> None:
        """Wait for the inputs, open the output item, stream the answer, then settle the
        status; a cancel at any point leaves `reason` set and stops there."""
        if not await self._inputs_ready():
            return
        self.chat = self._start_chat()
        if self.chat is None:
            return
        self._open_output()
        done = await self._stream_answer(self.chat)
        if done is not None:
            self.usage = _usage(done)
        if self.reason is not None:
            return
        if self.speaker is not None:
            await self.speaker.finish()
            if self.speaker.error is not None and self.reason is None:
                raise self.speaker.error
        if self.reason is None:
            self._settle(done)

    async def _inputs_ready(self) -> bool:
        """Wait for the turn's transcripts, or a cancel (False)."""
        waiter = asyncio.ensure_future(self._wait_inputs())
        stop = asyncio.ensure_future(self._cancel.wait())
        try:
            await asyncio.wait({waiter, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        if self.reason is not None:
            waiter.cancel()
            return False
        self.transcription_ms = waiter.result()
        return True

    def _open_output(self) -> None:
        """The assistant item and its content part, announced; the speaker, for audio."""
        self.item = self._new_item("in_progress")
        self._send(
            protocol.OutputItemAdded.build(response_id=self.id, output_index=0, item=self.item)
        )
        if self.in_conversation:
            previous = self._add_item(self.item)
            self._send(
                protocol.ConversationItemAdded.build(previous_item_id=previous, item=self.item)
            )
        part = {"type": "audio", "transcript": ""} if self.audio else {"type": "text", "text": ""}
        self._send(protocol.ContentPartAdded.build(**self._part_fields(), part=part))
        if self.audio:
            self.speaker = Speaker(
                self._synth(),
                voice=openai_voice(self.out.voice),
                speed=self.out.speed,
                rate=self.out.rate,
                send=self._send_audio,
                urgent=self.state.cores.speech,
            )

    async def _stream_answer(self, chat: ChatStream) -> Done | None:
        """The engine's events as response events; the loop guard ends a degenerate answer."""
        done: Done | None = None
        reasoning = ""
        guard = RepetitionGuard.for_speech() if self.audio else RepetitionGuard()
        async for ev in chat:
            if isinstance(ev, ContentDelta):
                if self.looping:
                    continue
                self._on_text(ev.text)
                if guard.feed(ev.text):  # a degenerate answer: ended, said in status_details
                    self.looping = True
                    chat.cancel()
            elif isinstance(ev, ReasoningDelta):
                reasoning += ev.text
                self._send(protocol.ReasoningDelta.build(response_id=self.id, delta=ev.text))
            elif isinstance(ev, ToolCallDelta):
                continue  # sessions refuse tools, so none are asked for
            elif isinstance(ev, Done):
                done = ev
        if reasoning:
            self._send(protocol.ReasoningDone.build(response_id=self.id, text=reasoning))
        return done

    def _settle(self, done: Done | None) -> None:
        """The status of a response that ran to its end."""
        if self.looping:
            self.status, self.reason = "incomplete", "repetition"
        elif done is not None and done.finish_reason == "length":
            self.status, self.reason = "incomplete", "max_output_tokens"
        elif done is not None and done.finish_reason == "error":
            self.status = "failed"
            self.error = {"type": "server_error", "code": "generation_failed", "message": ""}
        else:
            self.status = "completed"

    def _start_chat(self) -> ChatStream | None:
        state, out = self.state, self.out
        try:
            if not state.ready:
                raise LlamactlError(state.load_error or "the model is still loading")
            request = chat_request(state, out, self._messages())
            self.chat_started_at = time.monotonic()
            chat = self._adopt(request) if self._adopt is not None else None
            self.speculated = chat is not None
            if chat is None:
                chat = state.require_chat().start(request)
        except Exception as exc:  # a prompt too long for the context, a template error...
            self.status = "failed"
            self.error = {
                "type": "invalid_request_error",
                "code": "response_failed",
                "message": str(exc),
            }
            return None
        chat_serving.allow_control(chat)
        state.register(self.id, chat)
        return chat

    def _on_text(self, text: str) -> None:
        if not text:
            return
        if self.first_text_at is None:
            self.first_text_at = time.monotonic()
        self.text += text
        kind = protocol.AudioTranscriptDelta if self.audio else protocol.TextDelta
        self._send(kind.build(**self._part_fields(), delta=text))
        if self.speaker is not None:
            self.speaker.feed(text)

    def _send_audio(self, pcm: bytes) -> None:
        if self.first_audio_at is None:
            self.first_audio_at = time.monotonic()
        self._send(
            protocol.AudioDelta.build(**self._part_fields(), delta=base64.b64encode(pcm).decode())
        )

    def _close_item(self) -> None:
        """The `.done` events of whatever was opened, in reverse order of opening."""
        if self.item is None:
            return
        fields = self._part_fields()
        if self.audio:
            self._send(protocol.AudioDone.build(**fields))
            self._send(protocol.AudioTranscriptDone.build(**fields, transcript=self.text))
            part = {"type": "audio", "transcript": self.text}
        else:
            self._send(protocol.TextDone.build(**fields, text=self.text))
            part = {"type": "text", "text": self.text}
        self._send(protocol.ContentPartDone.build(**fields, part=part))
        self.item = self._new_item("completed" if self.status == "completed" else "incomplete")
        self._send(
            protocol.OutputItemDone.build(response_id=self.id, output_index=0, item=self.item)
        )
        if self.in_conversation:
            previous = self._finish_item(self.item)
            self._send(
                protocol.ConversationItemDone.build(previous_item_id=previous, item=self.item)
            )


def chat_request(
    state: ServerState, out: OutputConfig, messages: list[dict[str, Any]]
) -> ChatRequest:
    """The chat request of an answer with the output settings `out` to `messages`: one
    definition, so an answer started during the silence is the one the turn would get."""
    return ChatRequest(
        messages=messages,
        sampling=sampling_params(state, temperature=out.temperature),
        max_tokens=out.max_output_tokens or state.settings.max_tokens,
        reasoning_budget=_reasoning_budget(out.reasoning_budget, state),
        add_generation_prompt=True,
        continue_final_message=False,
        # someone is waiting to hear it: its first clause goes before chat streams' tokens
        urgent_tokens=URGENT_TOKENS if out.modalities == ["audio"] else 0,
    )


def _usage(done: Done) -> dict[str, Any]:
    u = done.usage
    return {
        "total_tokens": u.prompt_tokens + u.completion_tokens,
        "input_tokens": u.prompt_tokens,
        "output_tokens": u.completion_tokens,
        "input_token_details": {
            "text_tokens": u.prompt_tokens,
            "audio_tokens": 0,
            "image_tokens": 0,
            "cached_tokens": u.cached_tokens,
            "cached_tokens_details": {
                "text_tokens": u.cached_tokens,
                "audio_tokens": 0,
                "image_tokens": 0,
            },
        },
        "output_token_details": {"text_tokens": u.completion_tokens, "audio_tokens": 0},
    }


def _reasoning_budget(asked: int | None, state: ServerState) -> int | None:
    """The response's thinking bound: its own, else the server's (-1 and unset: none)."""
    budget = state.settings.reasoning_budget if asked is None else asked
    return budget if budget >= 0 else None
