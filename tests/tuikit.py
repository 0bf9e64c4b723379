"""Test doubles for the TUI: a scripted realtime server, silent audio sources, app factory.

`FakeRealtimeServer` is a small Starlette app on uvicorn (a thread, 127.0.0.1, free port)
that speaks the GA Realtime events the way llamactl's conversation sessions do, with a
scripted answer per response, and records every client event and every control request. Its
reasoning can be held open until `POST /v1/chat/completions/control` ends it, so tests can
check that the TUI sends the live response's id.

The fake builds every event it sends through `llamactl.realtime.protocol` (strictly: all the
fields the real server sends, no others) and reads every client event through it, so a change
of the protocol breaks the fake's tests as it breaks the server's; `SENT` keeps what it sent
(tests/test_realtime_protocol.py checks the real server against the same models).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import uvicorn
from llamactl.tui.audio import AudioSource
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from llamactl.core.errors import AudioDeviceError
from llamactl.devices import Player
from llamactl.realtime import protocol

MODEL = "fake-model"
FORMAT = {"type": "audio/pcm", "rate": 24000}


def session(output_modalities: list[str], turn_detection: Any = None) -> dict[str, Any]:
    """The effective conversation session, as llamactl reports it."""
    return {
        "object": "realtime.session",
        "type": "realtime",
        "id": "sess_fake",
        "model": MODEL,
        "output_modalities": output_modalities,
        "instructions": "",
        "audio": {
            "input": {
                "format": FORMAT,
                "transcription": {"model": "whisper-tiny.en", "prompt": "", "language": None},
                "turn_detection": turn_detection,
                "noise_reduction": None,
            },
            "output": {"format": FORMAT, "voice": "alloy", "speed": 1.0},
        },
        "max_output_tokens": "inf",
        "tool_choice": "auto",
        "tools": [],
        "tracing": None,
        "truncation": "auto",
        "include": None,
        "temperature": None,
        "reasoning_budget": None,
    }


@dataclass
class Script:
    """What every response does: reasoning deltas (then, with `hold_reasoning`, wait for the
    control request or a cancel), answer deltas, optional audio, then `response.done` with
    the latency metadata."""

    reasoning: list[str] = field(default_factory=list)
    hold_reasoning: bool = False
    answer: list[str] = field(default_factory=lambda: ["Two plus two ", "is four."])
    control_enabled: bool = True  # False: control requests are refused, as without the flag
    hold_answer: bool = False  # wait for a cancel after the first answer delta
    audio_ms: int = 0  # spoken answer: this much PCM16 silence, in 100 ms deltas
    refuse_semantic: bool = False  # as a server without Smart Turn: semantic_vad is an error
    transcript: list[str] = field(default_factory=lambda: ["What is ", "two plus two?"])
    metadata: dict[str, str] = field(
        default_factory=lambda: {
            "transcription_ms": "310",
            "first_token_ms": "120",
            "first_audio_ms": "450",
        }
    )


class FakeRealtimeServer:
    def __init__(self, script: Script | None = None, api_key: str | None = None) -> None:
        self.script = script or Script()
        self.api_key = api_key
        self.received: list[dict[str, Any]] = []
        self.sent: list[dict[str, Any]] = []  # every server event, as sent
        self.controls: list[dict[str, Any]] = []
        self.connections = 0
        self.url = ""
        self._live: dict[str, asyncio.Event] = {}  # response id -> reasoning ended
        self._loop: asyncio.AbstractEventLoop | None = None
        self._send: Any = None  # the open session's sender
        self._n = 0
        self.app = Starlette(
            routes=[
                WebSocketRoute("/v1/realtime", self._realtime),
                Route("/v1/chat/completions/control", self._control, methods=["POST"]),
                Route("/v1/models", self._models),
            ]
        )

    # ------------------------------------------------------------------ helpers
    def types(self) -> list[str]:
        return [e["type"] for e in self.received]

    def of_type(self, type_: str) -> list[dict[str, Any]]:
        return [e for e in self.received if e["type"] == type_]

    def push(self, type_: str, **fields: Any) -> None:
        """Send a server event on the open session from the test's thread (VAD, barge-in);
        the fields left out get the protocol's defaults."""
        assert self._loop is not None and self._send is not None
        cls = protocol.SERVER_EVENTS[type_]
        full = cls(**fields).model_dump(mode="json", exclude={"type", "event_id"})
        future = asyncio.run_coroutine_threadsafe(self._send(type_, **full), self._loop)
        future.result(timeout=5)

    def finish_reasoning(self, response_id: str) -> None:
        """End a held reasoning from the test's thread, as if the model had closed it."""
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._live[response_id].set)

    def _id(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}_{self._n}"

    # -------------------------------------------------------------------- routes
    async def _models(self, request: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    async def _control(self, request: Request) -> JSONResponse:
        body = await request.json()
        self.controls.append(body)
        ended = self._live.get(body.get("id"))
        if not self.script.control_enabled and ended is not None:
            message = "reasoning control not enabled for this completion"
            return JSONResponse({"success": False, "message": message})
        if ended is None or ended.is_set():
            return JSONResponse({"success": False, "message": "no active completion for this id"})
        ended.set()
        return JSONResponse({"success": True})

    async def _realtime(self, ws: WebSocket) -> None:
        wanted = f"Bearer {self.api_key}"
        if self.api_key is not None and ws.headers.get("authorization") != wanted:
            await ws.close()  # before accept: the handshake is refused (HTTP 403)
            return
        await ws.accept()
        self._loop = asyncio.get_running_loop()
        self.connections += 1
        lock = asyncio.Lock()
        running: dict[str, asyncio.Task[None]] = {}

        async def send(type_: str, **fields: Any) -> None:
            built = protocol.SERVER_EVENTS[type_].build(event_id=self._id("ev"), **fields)
            wire = built.wire()
            async with lock:
                self.sent.append(wire)
                await ws.send_text(json.dumps(wire))

        self._send = send
        await send("session.created", session=session(["audio"]))
        previous: str | None = None
        turn_detection: Any = None  # what the session's updates asked for
        try:
            while True:
                event = json.loads(await ws.receive_text())
                self.received.append(event)
                t = event["type"]
                parsed = protocol.CLIENT_EVENTS[t].parse(event)  # the client speaks the protocol
                if isinstance(parsed, protocol.SessionUpdate):
                    update = protocol.RealtimeSession.parse(parsed.session)
                    modalities = update.output_modalities or ["audio"]
                    asked = event["session"].get("audio", {}).get("input", {})
                    td = asked.get("turn_detection", turn_detection)
                    if self.script.refuse_semantic and (td or {}).get("type") == "semantic_vad":
                        await send(
                            "error",
                            error={
                                "type": "invalid_request_error",
                                "code": "model_not_found",
                                "message": "semantic turn detection needs Smart Turn",
                                "param": "session.audio.input.turn_detection.type",
                                "event_id": event.get("event_id"),
                            },
                        )
                        continue
                    turn_detection = td
                    await send("session.updated", session=session(modalities, turn_detection))
                elif isinstance(parsed, protocol.ConversationItemCreate):
                    item = {
                        "id": self._id("item"),
                        "object": "realtime.item",
                        "status": "completed",
                        **parsed.item.model_dump(mode="json", exclude_unset=True),
                    }
                    await send("conversation.item.added", previous_item_id=previous, item=item)
                    previous = item["id"]
                elif t == "input_audio_buffer.commit":
                    item_id = self._id("item")
                    await send(
                        "input_audio_buffer.committed", previous_item_id=previous, item_id=item_id
                    )
                    for delta in self.script.transcript:
                        await send(
                            "conversation.item.input_audio_transcription.delta",
                            item_id=item_id,
                            content_index=0,
                            delta=delta,
                        )
                    await send(
                        "conversation.item.input_audio_transcription.completed",
                        item_id=item_id,
                        content_index=0,
                        transcript="".join(self.script.transcript),
                        usage={"type": "duration", "seconds": 1.0},
                    )
                    previous = item_id
                elif t == "response.create":
                    rid = self._id("resp")
                    running[rid] = asyncio.create_task(self._respond(send, rid))
                elif t == "response.cancel":
                    for rid, task in list(running.items()):
                        if not task.done():
                            task.cancel()
                            with contextlib.suppress(asyncio.CancelledError):
                                await task
                            await send("response.done", response=self._response(rid, "cancelled"))
                        running.pop(rid)
        except (WebSocketDisconnect, RuntimeError):
            pass
        finally:
            for task in running.values():
                task.cancel()

    def _response(self, rid: str, status: str, spoken: bool = False) -> dict[str, Any]:
        """The response object: in progress (`response.created`) or ended."""
        details = None
        if status == "cancelled":
            details = {"type": status, "reason": "client_cancelled"}
        elif status != "in_progress":
            details = {"type": status}
        done = status != "in_progress"
        return {
            "object": "realtime.response",
            "id": rid,
            "status": status,
            "status_details": details,
            "output": [],
            "conversation_id": "conv_default",
            "output_modalities": ["audio"] if spoken else ["text"],
            "max_output_tokens": "inf",
            "audio": {"output": {"format": FORMAT, "voice": "alloy"}},
            "usage": {"total_tokens": 10, "input_tokens": 5, "output_tokens": 5} if done else None,
            "metadata": self.script.metadata if done else None,
        }

    async def _respond(self, send, rid: str) -> None:
        script = self.script
        item_id = self._id("item")
        ended = self._live[rid] = asyncio.Event()
        spoken = script.audio_ms > 0
        await send("response.created", response=self._response(rid, "in_progress", spoken))
        common = {"response_id": rid, "item_id": item_id, "output_index": 0, "content_index": 0}
        for delta in script.reasoning:
            if ended.is_set():
                break
            await send("response.reasoning.delta", response_id=rid, delta=delta)
        if script.hold_reasoning:
            await ended.wait()
        ended.set()
        kind = "response.output_audio_transcript" if spoken else "response.output_text"
        for i, delta in enumerate(script.answer):
            await send(f"{kind}.delta", delta=delta, **common)
            if spoken and i == 0:
                chunk = base64.b64encode(b"\x00\x00" * 2400).decode()
                for _ in range(script.audio_ms // 100):
                    await send("response.output_audio.delta", delta=chunk, **common)
            if script.hold_answer:
                await asyncio.Event().wait()  # until cancelled
        text = "".join(script.answer)
        if spoken:
            await send("response.output_audio.done", **common)
            await send(f"{kind}.done", transcript=text, **common)
        else:
            await send(f"{kind}.done", text=text, **common)
        await send("response.done", response=self._response(rid, "completed", spoken))

    # ------------------------------------------------------------------ serving
    @contextlib.contextmanager
    def running(self) -> Iterator[FakeRealtimeServer]:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        config = uvicorn.Config(self.app, log_level="warning", lifespan="off")
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        deadline = time.monotonic() + 10
        while not server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the fake realtime server did not start")
            time.sleep(0.01)
        self.url = f"http://127.0.0.1:{port}"
        try:
            yield self
        finally:
            server.should_exit = True
            thread.join(timeout=10)


def closed_port_url() -> str:
    """A URL on which nothing listens."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


# ------------------------------------------------------------------------ audio doubles


class IdleSource(AudioSource):
    """A microphone that records nothing until stopped (screens stay still)."""

    name = "test mic"

    def blocks(self):
        while not self._stop.wait(0.05):
            pass
        return
        yield


class BlocksSource(AudioSource):
    """Gives `n` blocks of a quiet tone when `release()` is called, then idles."""

    name = "tone"

    def __init__(self, n: int = 4) -> None:
        super().__init__()
        self.n = n
        self._go = threading.Event()
        t = np.arange(1200) / 24000
        self.block = (0.1 * 32767 * np.sin(2 * np.pi * 440 * t)).astype(np.int16)

    def release(self) -> None:
        self._go.set()

    def blocks(self):
        while not self._go.wait(0.05):
            if self._stop.is_set():
                return
        for _ in range(self.n):
            yield self.block
        while not self._stop.wait(0.05):
            pass


class BrokenSource(AudioSource):
    """A microphone that cannot open, with the given message (no device, no PortAudio)."""

    def __init__(self, message: str) -> None:
        super().__init__()
        self.message = message

    def open(self) -> None:
        raise AudioDeviceError(self.message)

    def blocks(self):
        return iter(())  # never reached: open() fails first


class HeldPlayer(Player):
    """A sound output that never drains: the answer's audio stays queued (barge-in tests)."""

    available = True


DEVICES = [
    {"index": 0, "name": "Built-in Microphone", "channels": 2, "default_rate": 48000,
     "is_default": True},
    {"index": 3, "name": "USB Headset", "channels": 1, "default_rate": 16000,
     "is_default": False},
]  # fmt: skip


def make_app(url: str, **kwargs: Any):
    """The app as the tests drive it: a still test mic, a silent player, two fake devices."""
    from llamactl.tui.app import ChatApp

    kwargs.setdefault("server_label", "test server")
    kwargs.setdefault("source_factory", lambda device: IdleSource())
    kwargs.setdefault("player_factory", lambda: (Player(), None))
    kwargs.setdefault("list_devices", lambda: DEVICES)
    return ChatApp(url, **kwargs)


async def wait_for(pilot, predicate, timeout: float = 10.0) -> None:
    """Let the app run until `predicate()` holds (events arrive over real sockets)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the app")
        await pilot.pause(0.02)
