"""Server events as the app acts on them: small typed records.

The events are read by `llamactl.realtime.protocol` (the one definition of the GA shapes and
llamactl's extensions, such as `response.reasoning.delta`); `of` keeps only what the app
shows or acts on, and merges what it treats alike (text and spoken answers, the reasoning
event names of both APIs). Anything unknown or unreadable becomes `Other` (never an error:
servers add events).
"""

from __future__ import annotations

import binascii
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from llamactl.realtime import protocol


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

    item: protocol.ConversationItem

    @property
    def role(self) -> str | None:
        return self.item.role

    @property
    def text(self) -> str:
        """The item's typed text (`input_text` / `text` parts), empty for audio parts."""
        return self.item.text


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


def parse(data: dict[str, Any]) -> ServerEvent:
    """One decoded JSON server event -> its typed record."""
    return of(protocol.read_server_event(data))


def of(event: protocol.ServerEvent) -> ServerEvent:
    """A protocol server event -> the record the app acts on."""
    reader = _READERS.get(type(event))
    return reader(event) if reader is not None else _other(event)


def _other(event: protocol.ServerEvent) -> ServerEvent:
    if isinstance(event, protocol.UnknownEvent) and event.type == "error":
        return ServerError("unknown server error")  # an error event we cannot read
    return Other(event.type, event.raw())


def _response_done(ev: protocol.ResponseDone) -> ResponseFinished:
    response = ev.response or protocol.Response()
    details = response.status_details or protocol.StatusDetails()
    return ResponseFinished(
        response_id=response.id,
        status=response.status,
        reason=details.reason or (details.error.message if details.error else None) or None,
        usage=response.usage.model_dump(exclude_unset=True) if response.usage else {},
        metadata=dict(response.metadata or {}),
    )


def _audio_delta(ev: protocol.AudioDelta) -> AudioDelta | ServerError:
    try:
        pcm = ev.pcm()
    except (binascii.Error, ValueError):
        return ServerError("the server sent audio that is not valid base64", code="bad_audio")
    return AudioDelta(ev.response_id, ev.item_id, pcm)


def _session(ev: protocol.SessionCreated | protocol.SessionUpdated) -> SessionReady:
    session = ev.session.model_dump(mode="json", exclude_unset=True)
    return SessionReady(session, updated=isinstance(ev, protocol.SessionUpdated))


def _error(ev: protocol.ErrorEvent) -> ServerError:
    err = ev.error
    return ServerError(err.message or "unknown server error", err.type or None, err.code, err.param)


P = protocol
_READERS: dict[type[protocol.ServerEvent], Callable[[Any], ServerEvent]] = {
    P.SessionCreated: _session,
    P.SessionUpdated: _session,
    P.SpeechStarted: lambda e: SpeechStarted(e.item_id, e.audio_start_ms),
    P.SpeechStopped: lambda e: SpeechStopped(e.item_id, e.audio_end_ms),
    P.InputAudioBufferCommitted: lambda e: InputCommitted(e.item_id),
    P.InputAudioBufferCleared: lambda e: InputCleared(),
    P.InputTranscriptionDelta: lambda e: UserTranscriptDelta(e.item_id, e.delta),
    P.InputTranscriptionCompleted: lambda e: UserTranscriptDone(e.item_id, e.transcript),
    P.InputTranscriptionFailed: lambda e: UserTranscriptFailed(
        e.item_id, e.error.message or "transcription failed"
    ),
    P.ConversationItemAdded: lambda e: ItemAdded(e.item),
    P.ConversationItemCreated: lambda e: ItemAdded(e.item),
    P.ResponseCreated: lambda e: ResponseStarted(e.response.id or ""),
    P.ReasoningDelta: lambda e: ReasoningDelta(e.response_id, e.delta),
    P.ReasoningDone: lambda e: ReasoningDone(e.response_id, e.text),
    P.TextDelta: lambda e: AnswerDelta(e.response_id, e.item_id, e.delta),
    P.AudioTranscriptDelta: lambda e: AnswerDelta(e.response_id, e.item_id, e.delta, spoken=True),
    P.TextDone: lambda e: AnswerDone(e.response_id, e.item_id, e.text),
    P.AudioTranscriptDone: lambda e: AnswerDone(
        e.response_id, e.item_id, e.transcript, spoken=True
    ),
    P.AudioDelta: _audio_delta,
    P.AudioDone: lambda e: AudioDone(e.response_id, e.item_id),
    P.ResponseDone: _response_done,
    P.OutputAudioBufferCleared: lambda e: OutputAudioCleared(e.response_id),
    P.ConversationItemTruncated: lambda e: ItemTruncated(e.item_id, e.audio_end_ms),
    P.ErrorEvent: _error,
}
