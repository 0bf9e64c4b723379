"""Server events of the Realtime API as small typed records.

The wire shapes are OpenAI's GA Realtime events (openai-python `types/realtime/`); `parse`
keeps only what a client shows or acts on, so the app never digs through raw dicts. Reasoning
has no GA event: llamactl sends `response.reasoning.delta` / `.done` (an extension); the
Responses API names (`response.reasoning_text.delta`) are read too. Anything unknown becomes
`Other` (never an error: servers add events).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class SessionReady:
    """`session.created` / `session.updated`: the effective session."""

    session: dict[str, Any]
    updated: bool = False

    @property
    def model(self) -> str | None:
        value = self.session.get("model")
        return value if isinstance(value, str) and value else None


@dataclass(frozen=True, slots=True)
class SpeechStarted:
    item_id: str | None
    audio_start_ms: int | None


@dataclass(frozen=True, slots=True)
class SpeechStopped:
    item_id: str | None
    audio_end_ms: int | None


@dataclass(frozen=True, slots=True)
class InputCommitted:
    item_id: str | None


@dataclass(frozen=True, slots=True)
class InputCleared:
    pass


@dataclass(frozen=True, slots=True)
class UserTranscriptDelta:
    item_id: str | None
    delta: str


@dataclass(frozen=True, slots=True)
class UserTranscriptDone:
    item_id: str | None
    transcript: str


@dataclass(frozen=True, slots=True)
class UserTranscriptFailed:
    item_id: str | None
    message: str


@dataclass(frozen=True, slots=True)
class ItemAdded:
    """`conversation.item.added` / `.created`: a user text item, an assistant message..."""

    item: dict[str, Any]

    @property
    def role(self) -> str | None:
        return self.item.get("role")

    @property
    def text(self) -> str:
        """The item's typed text (`input_text` / `text` parts), empty for audio parts."""
        parts = self.item.get("content") or []
        return "".join(p.get("text") or "" for p in parts if isinstance(p, dict) and "text" in p)


@dataclass(frozen=True, slots=True)
class ResponseStarted:
    response_id: str


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    response_id: str | None
    delta: str


@dataclass(frozen=True, slots=True)
class ReasoningDone:
    response_id: str | None
    text: str


@dataclass(frozen=True, slots=True)
class AnswerDelta:
    """Answer text: `response.output_text.delta`, or `response.output_audio_transcript.delta`
    when the answer is spoken (the transcript is the text of what is said)."""

    response_id: str | None
    item_id: str | None
    delta: str
    spoken: bool = False


@dataclass(frozen=True, slots=True)
class AnswerDone:
    response_id: str | None
    item_id: str | None
    text: str
    spoken: bool = False


@dataclass(frozen=True, slots=True)
class AudioDelta:
    """`response.output_audio.delta`, decoded: PCM16 LE mono at the session's output rate."""

    response_id: str | None
    item_id: str | None
    pcm: bytes


@dataclass(frozen=True, slots=True)
class AudioDone:
    response_id: str | None
    item_id: str | None


@dataclass(frozen=True, slots=True)
class ResponseFinished:
    """`response.done`: status `completed`, `cancelled`, `failed` or `incomplete`."""

    response_id: str | None
    status: str
    reason: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class OutputAudioCleared:
    """The server dropped a response's audio (barge-in by voice): stop playing it."""

    response_id: str | None


@dataclass(frozen=True, slots=True)
class ItemTruncated:
    item_id: str | None
    audio_end_ms: int | None


@dataclass(frozen=True, slots=True)
class ServerError:
    """An `error` event; the socket stays open unless the server closes it."""

    message: str
    type: str | None = None
    code: str | None = None
    param: str | None = None


@dataclass(frozen=True, slots=True)
class Other:
    """An event the TUI does not act on."""

    type: str
    raw: dict[str, Any]


ServerEvent = (
    SessionReady
    | SpeechStarted
    | SpeechStopped
    | InputCommitted
    | InputCleared
    | UserTranscriptDelta
    | UserTranscriptDone
    | UserTranscriptFailed
    | ItemAdded
    | ResponseStarted
    | ReasoningDelta
    | ReasoningDone
    | AnswerDelta
    | AnswerDone
    | AudioDelta
    | AudioDone
    | ResponseFinished
    | OutputAudioCleared
    | ItemTruncated
    | ServerError
    | Other
)


REASONING_DELTAS = (
    "response.reasoning.delta",
    "response.reasoning_text.delta",
    "response.reasoning_summary_text.delta",
)
REASONING_DONES = (
    "response.reasoning.done",
    "response.reasoning_text.done",
    "response.reasoning_summary_text.done",
)


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _response_done(ev: dict[str, Any]) -> ResponseFinished:
    response = _dict(ev.get("response"))
    details = _dict(response.get("status_details"))
    return ResponseFinished(
        response_id=_str(response.get("id")),
        status=_str(response.get("status")) or "completed",
        reason=_str(details.get("reason")) or _str(_dict(details.get("error")).get("message")),
        usage=_dict(response.get("usage")),
        metadata=_dict(response.get("metadata")),
    )


def _audio_delta(ev: dict[str, Any]) -> AudioDelta | ServerError:
    try:
        pcm = base64.b64decode(_str(ev.get("delta")) or "", validate=True)
    except (binascii.Error, ValueError):
        return ServerError("the server sent audio that is not valid base64", code="bad_audio")
    return AudioDelta(_str(ev.get("response_id")), _str(ev.get("item_id")), pcm)


def parse(ev: dict[str, Any]) -> ServerEvent:
    """One decoded JSON server event -> its typed record."""
    t = _str(ev.get("type")) or ""
    rid = _str(ev.get("response_id"))
    iid = _str(ev.get("item_id"))
    if t in ("session.created", "session.updated"):
        return SessionReady(_dict(ev.get("session")), updated=t == "session.updated")
    if t == "input_audio_buffer.speech_started":
        return SpeechStarted(iid, _int(ev.get("audio_start_ms")))
    if t == "input_audio_buffer.speech_stopped":
        return SpeechStopped(iid, _int(ev.get("audio_end_ms")))
    if t == "input_audio_buffer.committed":
        return InputCommitted(iid)
    if t == "input_audio_buffer.cleared":
        return InputCleared()
    if t == "conversation.item.input_audio_transcription.delta":
        return UserTranscriptDelta(iid, _str(ev.get("delta")) or "")
    if t == "conversation.item.input_audio_transcription.completed":
        return UserTranscriptDone(iid, _str(ev.get("transcript")) or "")
    if t == "conversation.item.input_audio_transcription.failed":
        message = _str(_dict(ev.get("error")).get("message")) or "transcription failed"
        return UserTranscriptFailed(iid, message)
    if t in ("conversation.item.added", "conversation.item.created"):
        return ItemAdded(_dict(ev.get("item")))
    if t == "response.created":
        return ResponseStarted(_str(_dict(ev.get("response")).get("id")) or "")
    if t in REASONING_DELTAS:
        return ReasoningDelta(rid, _str(ev.get("delta")) or "")
    if t in REASONING_DONES:
        return ReasoningDone(rid, _str(ev.get("text")) or "")
    if t == "response.output_text.delta":
        return AnswerDelta(rid, iid, _str(ev.get("delta")) or "")
    if t == "response.output_audio_transcript.delta":
        return AnswerDelta(rid, iid, _str(ev.get("delta")) or "", spoken=True)
    if t == "response.output_text.done":
        return AnswerDone(rid, iid, _str(ev.get("text")) or "")
    if t == "response.output_audio_transcript.done":
        return AnswerDone(rid, iid, _str(ev.get("transcript")) or "", spoken=True)
    if t == "response.output_audio.delta":
        return _audio_delta(ev)
    if t == "response.output_audio.done":
        return AudioDone(rid, iid)
    if t == "response.done":
        return _response_done(ev)
    if t == "output_audio_buffer.cleared":
        return OutputAudioCleared(rid)
    if t == "conversation.item.truncated":
        return ItemTruncated(iid, _int(ev.get("audio_end_ms")))
    if t == "error":
        err = _dict(ev.get("error"))
        return ServerError(
            _str(err.get("message")) or "unknown server error",
            type=_str(err.get("type")),
            code=_str(err.get("code")),
            param=_str(err.get("param")),
        )
    return Other(t, ev)
