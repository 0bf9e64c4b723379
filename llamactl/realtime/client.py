"""llamactl's one client of `/v1/realtime` (the TUI and `llamactl transcribe --url` use it).

One websocket speaking the GA events of `protocol`: the `send`-style methods build client
events from its models, `events()` yields server events read through them. Ending a
response's reasoning is not a realtime event: it is llamactl's
`POST /v1/chat/completions/control` with the live response's id, sent over HTTP beside the
socket. The client runs on asyncio; `BlockingClient` runs the same client on a private loop
thread for code that has none (the transcribe CLI, whose main thread waits for Ctrl-C).
Failures are the typed errors of `errors` (no Textual, no FastAPI in here).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import queue
import secrets
import threading
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import quote, urlencode, urlsplit, urlunsplit

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI

from llamactl.core.errors import (
    AuthenticationError,
    ConnectionClosedError,
    ServerUnreachableError,
)

from . import protocol

__all__ = [
    "RATE",
    "TURN_HELP",
    "TURN_MODES",
    "BlockingClient",
    "ControlResult",
    "Endpoint",
    "RealtimeClient",
    "session_config",
    "transcription_session_config",
    "turn_detection",
]

RATE = protocol.DEFAULT_RATE  # PCM16 mono, both directions: OpenAI's rate, llamactl's default

T = TypeVar("T")


@dataclass(frozen=True)
class Endpoint:
    """A server's base URL (`http://host:port`, with or without `/v1`) and its routes."""

    base: str  # scheme://host[:port][/prefix], without a trailing /v1

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        text = url.strip()
        if "://" not in text:
            text = "http://" + text
        parts = urlsplit(text)
        if parts.scheme not in ("http", "https", "ws", "wss") or not parts.hostname:
            raise ServerUnreachableError(f"not a server URL: {url!r} (try http://127.0.0.1:8080)")
        scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
        path = parts.path.rstrip("/")
        for tail in ("/v1/realtime", "/realtime", "/v1"):
            if path.endswith(tail):
                path = path[: -len(tail)]
                break
        return cls(urlunsplit((scheme, parts.netloc, path, "", "")))

    @property
    def http(self) -> str:
        return self.base + "/v1"

    def realtime(self, model: str | None = None, intent: str | None = None) -> str:
        ws = "wss" + self.base[5:] if self.base.startswith("https") else "ws" + self.base[4:]
        query = {k: v for k, v in (("model", model), ("intent", intent)) if v}
        return f"{ws}/v1/realtime" + ("?" + urlencode(query, quote_via=quote) if query else "")

    @property
    def control(self) -> str:
        return self.http + "/chat/completions/control"


@dataclass(frozen=True)
class ControlResult:
    """The control endpoint's answer: `success`, or why not (the response already ended...)."""

    success: bool
    message: str | None = None


def _body(model: type[protocol.TranscriptionSession | protocol.RealtimeSession], **fields: Any):
    """A `session.update` body built (and so checked) by the protocol's session model."""
    return model.model_validate(fields).model_dump(mode="json", exclude_unset=True)


TURN_MODES = ("server", "semantic", "manual")
TURN_HELP = {
    "server": "server VAD: a turn ends after 500 ms of silence",
    "semantic": "semantic VAD: a turn ends when the speaker sounds finished (Smart Turn)",
    "manual": "push to talk: the client commits each turn",
}


def turn_detection(mode: str, eagerness: str = "auto") -> dict[str, Any] | None:
    """`audio.input.turn_detection` for a turn mode of `TURN_MODES` (manual: None)."""
    if mode == "server":
        return dict(protocol.SERVER_VAD)
    if mode == "semantic":
        return {"type": "semantic_vad", "eagerness": eagerness}
    if mode == "manual":
        return None
    raise ValueError(f"turn mode must be one of {', '.join(TURN_MODES)}, got {mode!r}")


def session_config(
    *,
    vad: bool = True,
    turn: str | None = None,
    eagerness: str = "auto",
    audio_out: bool,
    rate: int = RATE,
    instructions: str | None = None,
    transcription_model: str | None = None,
    reasoning_budget: int | None = None,
    voice: str | None = None,
) -> dict[str, Any]:
    """A conversation's `session.update` body: PCM16 both ways, turns by `turn` (a mode of
    `TURN_MODES`; left out, server VAD if `vad` else push to talk), spoken or text-only
    answers in `voice` (left out: the server's default). The user's speech is always
    transcribed. `reasoning_budget` bounds each answer's thinking (llamactl's extension)."""
    detection = turn_detection(turn or ("server" if vad else "manual"), eagerness)
    transcription = {"model": transcription_model} if transcription_model else {}
    fields: dict[str, Any] = {
        "type": "realtime",
        "output_modalities": ["audio"] if audio_out else ["text"],
        "audio": {
            "input": {
                "format": {"type": "audio/pcm", "rate": rate},
                "transcription": transcription,
                "turn_detection": detection,
            },
            "output": {"format": {"type": "audio/pcm", "rate": rate}},
        },
    }
    if voice:
        fields["audio"]["output"]["voice"] = voice
    if instructions:
        fields["instructions"] = instructions
    if reasoning_budget is not None:
        fields["reasoning_budget"] = reasoning_budget
    return _body(protocol.RealtimeSession, **fields)


def transcription_session_config(
    *, rate: int, language: str | None, turn: str = "server", eagerness: str = "auto"
) -> dict[str, Any]:
    """A transcription session's `session.update` body: PCM16 at `rate`, turns by `turn`."""
    return _body(
        protocol.TranscriptionSession,
        type="transcription",
        audio={
            "input": {
                "format": {"type": "audio/pcm", "rate": rate},
                "transcription": {"language": language},
                "turn_detection": turn_detection(turn, eagerness),
            }
        },
    )


def _event_id() -> str:
    return "evt_" + secrets.token_hex(8)


class RealtimeClient:
    """One session over one websocket; `connect()` first, `close()` at the end. `intent`
    `"transcription"` opens a transcription session, otherwise a conversation."""

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None = None,
        model: str | None = None,
        intent: str | None = None,
        open_timeout: float = 10.0,
    ) -> None:
        self.endpoint = Endpoint.parse(url)
        self.api_key = api_key
        self.model = model
        self.intent = intent
        self.open_timeout = open_timeout
        self._ws: ClientConnection | None = None
        self._closing = False

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    @property
    def connected(self) -> bool:
        return self._ws is not None and not self._closing

    # ------------------------------------------------------------------ lifecycle
    async def connect(self) -> None:
        url = self.endpoint.realtime(self.model, self.intent)
        try:
            self._ws = await connect(
                url,
                additional_headers=self.headers,
                max_size=None,
                open_timeout=self.open_timeout,
                ping_interval=20,
                ping_timeout=60,
            )
        except InvalidStatus as exc:
            status = exc.response.status_code
            if status in (401, 403):
                raise AuthenticationError(
                    f"the server at {self.endpoint.base} refused the API key (HTTP {status}); "
                    "pass the right one with --api-key"
                ) from None
            raise ServerUnreachableError(
                f"{url} answered HTTP {status}: is it a llamactl server?"
            ) from None
        except (OSError, TimeoutError, InvalidURI, InvalidHandshake) as exc:
            reason = str(exc) or type(exc).__name__
            raise ServerUnreachableError(
                f"cannot reach the server at {self.endpoint.base}: {reason}"
            ) from None
        self._closing = False

    async def close(self) -> None:
        self._closing = True
        ws, self._ws = self._ws, None
        if ws is not None:
            with contextlib.suppress(Exception):
                await ws.close()

    async def events(self) -> AsyncIterator[protocol.ServerEvent]:
        """Server events until the socket closes; an unexpected close raises
        ConnectionClosedError, `close()` ends the iteration quietly."""
        ws = self._require()
        try:
            async for message in ws:
                if isinstance(message, bytes):
                    continue
                try:
                    data = json.loads(message)
                except ValueError:
                    continue
                if isinstance(data, dict):
                    yield protocol.read_server_event(data)
        except ConnectionClosed as exc:
            if not self._closing:
                raise ConnectionClosedError(self._closed_reason(exc)) from None
            return
        if not self._closing:
            raise ConnectionClosedError(self._closed_reason(None))

    @staticmethod
    def _closed_reason(exc: ConnectionClosed | None) -> str:
        rcvd = exc.rcvd if exc is not None else None
        if rcvd is not None and rcvd.reason:
            return f"the server closed the session: {rcvd.reason}"
        return "the server closed the session"

    def _require(self) -> ClientConnection:
        if self._ws is None:
            raise ConnectionClosedError("not connected")
        return self._ws

    # --------------------------------------------------------------- client events
    async def send(self, event: protocol.ClientEvent) -> None:
        ws = self._require()
        if event.event_id is None:
            event.event_id = _event_id()
        try:
            await ws.send(json.dumps(event.wire()))
        except ConnectionClosed as exc:
            raise ConnectionClosedError(self._closed_reason(exc)) from None

    async def update_session(self, session: dict[str, Any]) -> None:
        await self.send(protocol.SessionUpdate(session=session))

    async def append_audio(self, pcm: bytes) -> None:
        if pcm:
            await self.send(protocol.InputAudioBufferAppend(audio=protocol.encode_audio(pcm)))

    async def commit(self) -> None:
        await self.send(protocol.InputAudioBufferCommit())

    async def clear_input(self) -> None:
        await self.send(protocol.InputAudioBufferClear())

    async def add_user_text(self, text: str) -> None:
        item = {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": text}],
        }
        await self.send(protocol.ConversationItemCreate(item=item))

    async def create_response(self) -> None:
        await self.send(protocol.ResponseCreate())

    async def cancel_response(self, response_id: str | None = None) -> None:
        if response_id:
            await self.send(protocol.ResponseCancel(response_id=response_id))
        else:
            await self.send(protocol.ResponseCancel())

    async def truncate(self, item_id: str, audio_end_ms: int) -> None:
        """The assistant item was heard only up to `audio_end_ms` (barge-in)."""
        await self.send(
            protocol.ConversationItemTruncate(
                item_id=item_id, content_index=0, audio_end_ms=max(0, int(audio_end_ms))
            )
        )

    # -------------------------------------------------------------------- control
    async def end_reasoning(self, response_id: str) -> ControlResult:
        """Ask the server to end the live response's reasoning now (llamactl extension)."""
        body: dict[str, Any] = {"id": response_id, "action": "reasoning_end"}
        if self.model:
            body["model"] = self.model  # routes the request in router mode
        try:
            async with httpx.AsyncClient(timeout=10) as http:
                r = await http.post(self.endpoint.control, json=body, headers=self.headers)
        except httpx.HTTPError as exc:
            raise ServerUnreachableError(
                f"cannot reach {self.endpoint.control}: {exc or type(exc).__name__}"
            ) from None
        try:
            data = r.json()
        except ValueError:
            data = {}
        if r.status_code != 200:
            err = data.get("error") if isinstance(data, dict) else None
            message = err.get("message") if isinstance(err, dict) else None
            return ControlResult(False, message or f"HTTP {r.status_code}")
        return ControlResult(bool(data.get("success")), data.get("message"))

    async def model_ids(self) -> list[str]:
        """`GET /v1/models` ids (empty when the server does not say)."""
        try:
            async with httpx.AsyncClient(timeout=5) as http:
                r = await http.get(self.endpoint.http + "/models", headers=self.headers)
            data = r.json().get("data", []) if r.status_code == 200 else []
        except (httpx.HTTPError, ValueError, AttributeError):
            return []
        return [m["id"] for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]


class BlockingClient:
    """A `RealtimeClient` for threads without an event loop: it runs on a private loop
    thread, calls block until done, and `recv()` hands server events over in order (a
    closed socket is raised from `recv`, as ConnectionClosedError)."""

    def __init__(self, client: RealtimeClient) -> None:
        self.client = client
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="llamactl-realtime", daemon=True
        )
        self._events: queue.Queue[protocol.ServerEvent | BaseException] = queue.Queue()
        self._reader: concurrent.futures.Future[None] | None = None

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def connect(self) -> BlockingClient:
        self._thread.start()
        try:
            self._run(self.client.connect())
        except BaseException:
            self.close()
            raise
        self._reader = asyncio.run_coroutine_threadsafe(self._read(), self._loop)
        return self

    async def _read(self) -> None:
        try:
            async for event in self.client.events():
                self._events.put(event)
        except BaseException as exc:
            self._events.put(exc)
            return
        self._events.put(ConnectionClosedError("the session was closed"))

    def recv(self, timeout: float) -> protocol.ServerEvent | None:
        """The next server event, or None after `timeout` seconds without one."""
        try:
            got = self._events.get(timeout=timeout)
        except queue.Empty:
            return None
        if isinstance(got, BaseException):
            self._events.put(got)  # every later recv says so too
            raise got
        return got

    def send(self, event: protocol.ClientEvent) -> None:
        self._run(self.client.send(event))

    def update_session(self, session: dict[str, Any]) -> None:
        self._run(self.client.update_session(session))

    def append_audio(self, pcm: bytes) -> None:
        self._run(self.client.append_audio(pcm))

    def commit(self) -> None:
        self._run(self.client.commit())

    def close(self) -> None:
        if self._thread.is_alive():
            with contextlib.suppress(Exception):
                self._run(self.client.close(), timeout=5)
            if self._reader is not None:
                with contextlib.suppress(Exception):
                    self._reader.result(timeout=5)  # ends once the socket is closed
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
        if not self._loop.is_running():
            self._loop.close()

    def __enter__(self) -> BlockingClient:
        return self.connect()

    def __exit__(self, *exc: object) -> None:
        self.close()
