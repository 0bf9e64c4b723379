"""A client of llamactl's `/v1/realtime` conversation sessions (no Textual in here).

One websocket speaks OpenAI's GA Realtime events: `send_*` methods build client events,
`events()` yields typed server events (see events.py). Ending a response's reasoning is not a
realtime event: it is llamactl's `POST /v1/chat/completions/control` with the live response's
id, sent over HTTP beside the socket. Failures surface as the typed errors in errors.py.
"""

from __future__ import annotations

import base64
import contextlib
import json
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI

from llamactl import AuthenticationError, ConnectionClosedError, ServerUnreachableError

from .events import ServerEvent, parse

RATE = 24000  # PCM16 mono, both directions: OpenAI's fixed rate, llamactl's default


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

    def realtime(self, model: str | None = None) -> str:
        ws = "wss" + self.base[5:] if self.base.startswith("https") else "ws" + self.base[4:]
        query = f"?model={quote(model)}" if model else ""
        return f"{ws}/v1/realtime{query}"

    @property
    def control(self) -> str:
        return self.http + "/chat/completions/control"


@dataclass(frozen=True)
class ControlResult:
    """The control endpoint's answer: `success`, or why not (the response already ended...)."""

    success: bool
    message: str | None = None


def session_config(
    *,
    vad: bool,
    audio_out: bool,
    rate: int = RATE,
    instructions: str | None = None,
    transcription_model: str | None = None,
) -> dict[str, Any]:
    """The `session.update` body: PCM16 both ways, server VAD or client commits (push to talk),
    spoken or text-only answers. The user's speech is always transcribed."""
    turn = None
    if vad:
        turn = {
            "type": "server_vad",
            "threshold": 0.5,
            "prefix_padding_ms": 300,
            "silence_duration_ms": 500,
        }
    transcription: dict[str, Any] = {}
    if transcription_model:
        transcription["model"] = transcription_model
    session: dict[str, Any] = {
        "type": "realtime",
        "output_modalities": ["audio"] if audio_out else ["text"],
        "audio": {
            "input": {
                "format": {"type": "audio/pcm", "rate": rate},
                "transcription": transcription,
                "turn_detection": turn,
            },
            "output": {"format": {"type": "audio/pcm", "rate": rate}},
        },
    }
    if instructions:
        session["instructions"] = instructions
    return session


def _event_id() -> str:
    return "evt_" + secrets.token_hex(8)


class RealtimeClient:
    """One conversation session over one websocket; `connect()` first, `close()` at the end."""

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None = None,
        model: str | None = None,
        open_timeout: float = 10.0,
    ) -> None:
        self.endpoint = Endpoint.parse(url)
        self.api_key = api_key
        self.model = model
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
        url = self.endpoint.realtime(self.model)
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

    async def events(self) -> AsyncIterator[ServerEvent]:
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
                    yield parse(data)
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
    async def send(self, type_: str, **fields: Any) -> None:
        ws = self._require()
        try:
            await ws.send(json.dumps({"type": type_, "event_id": _event_id(), **fields}))
        except ConnectionClosed as exc:
            raise ConnectionClosedError(self._closed_reason(exc)) from None

    async def update_session(self, session: dict[str, Any]) -> None:
        await self.send("session.update", session=session)

    async def append_audio(self, pcm: bytes) -> None:
        if pcm:
            await self.send("input_audio_buffer.append", audio=base64.b64encode(pcm).decode())

    async def commit(self) -> None:
        await self.send("input_audio_buffer.commit")

    async def clear_input(self) -> None:
        await self.send("input_audio_buffer.clear")

    async def add_user_text(self, text: str) -> None:
        await self.send(
            "conversation.item.create",
            item={
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": text}],
            },
        )

    async def create_response(self) -> None:
        await self.send("response.create")

    async def cancel_response(self, response_id: str | None = None) -> None:
        fields = {"response_id": response_id} if response_id else {}
        await self.send("response.cancel", **fields)

    async def truncate(self, item_id: str, audio_end_ms: int) -> None:
        """The assistant item was heard only up to `audio_end_ms` (barge-in)."""
        await self.send(
            "conversation.item.truncate",
            item_id=item_id,
            content_index=0,
            audio_end_ms=max(0, int(audio_end_ms)),
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
