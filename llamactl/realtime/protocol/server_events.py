"""Server events (read tolerantly by clients, checked strictly by tests)."""

from __future__ import annotations

import base64
from typing import Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
)
from typing_extensions import Self

from ..errors import ProtocolError
from ._shape import _STRICT, _Shape, new_id
from .items import ConversationItem
from .session import Modality, RealtimeSession, ResponseAudioOutput, Session

__all__ = [
    "SERVER_EVENTS",
    "AudioDelta",
    "AudioDone",
    "AudioTranscriptDelta",
    "AudioTranscriptDone",
    "ContentPartAdded",
    "ContentPartDone",
    "ConversationItemAdded",
    "ConversationItemCreated",
    "ConversationItemDeleted",
    "ConversationItemDone",
    "ConversationItemRetrieved",
    "ConversationItemTruncated",
    "ErrorEvent",
    "InputAudioBufferCleared",
    "InputAudioBufferCommitted",
    "InputTranscriptionCompleted",
    "InputTranscriptionDelta",
    "InputTranscriptionFailed",
    "OutputAudioBufferCleared",
    "OutputItemAdded",
    "OutputItemDone",
    "RealtimeError",
    "ReasoningDelta",
    "ReasoningDone",
    "Response",
    "ResponseCreated",
    "ResponseDone",
    "ServerEvent",
    "SessionCreated",
    "SessionUpdated",
    "SpeechStarted",
    "SpeechStopped",
    "StatusDetails",
    "TextDelta",
    "TextDone",
    "UnknownEvent",
    "Usage",
    "check_server_event",
    "error_event",
    "read_server_event",
    "refusal",
    "refusal_event",
]


# -------------------------------------------------------------------- server events
class ServerEvent(_Shape):
    """Every server event: a `type` and the server's `event_id`."""

    type: str
    event_id: str = ""

    def raw(self) -> dict[str, Any]:
        """The event's fields as they came (or as built)."""
        return self.model_dump(exclude_unset=True)

    @classmethod
    def build(cls, **fields: Any) -> Self:
        """The event from its fields, checked as `check_server_event` checks (the fake
        server builds its events so, and cannot drift from what clients read)."""
        unknown = set(fields) - set(cls.model_fields)
        if unknown:
            raise TypeError(f"{cls.__name__} has no fields {sorted(unknown)}")
        fields.setdefault("event_id", new_id("event_"))
        return cls.model_validate(
            {"type": cls.model_fields["type"].default, **fields}, context=_STRICT
        )

    def wire(self) -> dict[str, Any]:
        """The event as sent: its type, its id, then its fields."""
        data = self.model_dump(mode="json", exclude_unset=True, exclude={"type", "event_id"})
        return {"type": self.type, "event_id": self.event_id} | data


class RealtimeError(_Shape):
    type: str = ""
    code: str | None = None
    message: str = ""
    param: str | None = None
    event_id: str | None = None  # the refused client event's id


class ErrorEvent(ServerEvent):
    """A refused client event or a failed session; the socket stays open unless the
    server closes it."""

    type: Literal["error"] = "error"
    error: RealtimeError = Field(default_factory=RealtimeError)


def error_event(
    message: str,
    *,
    type_: str = "invalid_request_error",
    code: str | None = None,
    param: str | None = None,
    event_id: str | None = None,
) -> dict[str, Any]:
    """An `error` event as the server sends it."""
    return _error(message, type_=type_, code=code, param=param, event_id=event_id).wire()


def _error(
    message: str, *, type_: str, code: str | None, param: str | None, event_id: str | None
) -> ErrorEvent:
    error = {"type": type_, "code": code, "message": message, "param": param}
    return ErrorEvent.build(error={**error, "event_id": event_id})


def refusal(exc: ProtocolError, event_id: str | None = None) -> ErrorEvent:
    """The `error` event for a refused client event (`event_id`: the refused event's id)."""
    return _error(exc.message, type_=exc.type, code=exc.code, param=exc.param, event_id=event_id)


def refusal_event(exc: ProtocolError, event_id: str | None = None) -> dict[str, Any]:
    """`refusal(...)` as sent."""
    return refusal(exc, event_id).wire()


class _SessionEvent(ServerEvent):
    """`session.created` / `.updated`. The session models read a client's partial update and
    normalize it (a null `include` reads as `[]`, keys come out in field order), so a session
    the server built is checked against them but sent as built, not rewritten."""

    session: Session = Field(default_factory=RealtimeSession)
    _built: dict[str, Any] | None = PrivateAttr(default=None)

    @classmethod
    def build(cls, **fields: Any) -> Self:
        built = super().build(**fields)
        session = fields.get("session")
        if isinstance(session, dict):
            built._built = session
        return built

    def wire(self) -> dict[str, Any]:
        data = super().wire()
        if self._built is not None:
            data["session"] = self._built
        return data


class SessionCreated(_SessionEvent):
    type: Literal["session.created"] = "session.created"


class SessionUpdated(_SessionEvent):
    type: Literal["session.updated"] = "session.updated"


class SpeechStarted(ServerEvent):
    type: Literal["input_audio_buffer.speech_started"] = "input_audio_buffer.speech_started"
    audio_start_ms: int | None = None
    item_id: str | None = None


class SpeechStopped(ServerEvent):
    type: Literal["input_audio_buffer.speech_stopped"] = "input_audio_buffer.speech_stopped"
    audio_end_ms: int | None = None
    item_id: str | None = None


class InputAudioBufferCommitted(ServerEvent):
    """`audio_start_ms` / `audio_end_ms` (where the item's audio lies) are an extension."""

    omittable = frozenset({"audio_start_ms", "audio_end_ms"})

    type: Literal["input_audio_buffer.committed"] = "input_audio_buffer.committed"
    previous_item_id: str | None = None
    item_id: str | None = None
    audio_start_ms: int | None = None
    audio_end_ms: int | None = None


class InputAudioBufferCleared(ServerEvent):
    type: Literal["input_audio_buffer.cleared"] = "input_audio_buffer.cleared"


class InputTranscriptionDelta(ServerEvent):
    type: Literal["conversation.item.input_audio_transcription.delta"] = (
        "conversation.item.input_audio_transcription.delta"
    )
    item_id: str | None = None
    content_index: int = 0
    delta: str = ""


class TranscriptionUsage(_Shape):
    type: Literal["duration"] = "duration"
    seconds: float = 0.0


class InputTranscriptionCompleted(ServerEvent):
    type: Literal["conversation.item.input_audio_transcription.completed"] = (
        "conversation.item.input_audio_transcription.completed"
    )
    item_id: str | None = None
    content_index: int = 0
    transcript: str = ""
    usage: TranscriptionUsage | None = None


class ErrorDetail(_Shape):
    type: str = ""
    code: str | None = None
    message: str = ""


class InputTranscriptionFailed(ServerEvent):
    type: Literal["conversation.item.input_audio_transcription.failed"] = (
        "conversation.item.input_audio_transcription.failed"
    )
    item_id: str | None = None
    content_index: int = 0
    error: ErrorDetail = Field(default_factory=ErrorDetail)


class ConversationItemAdded(ServerEvent):
    type: Literal["conversation.item.added"] = "conversation.item.added"
    previous_item_id: str | None = None
    item: ConversationItem = Field(default_factory=ConversationItem)


class ConversationItemCreated(ServerEvent):
    """The beta name of `conversation.item.added` (read, never sent)."""

    type: Literal["conversation.item.created"] = "conversation.item.created"
    previous_item_id: str | None = None
    item: ConversationItem = Field(default_factory=ConversationItem)


class ConversationItemDone(ServerEvent):
    type: Literal["conversation.item.done"] = "conversation.item.done"
    previous_item_id: str | None = None
    item: ConversationItem = Field(default_factory=ConversationItem)


class ConversationItemDeleted(ServerEvent):
    type: Literal["conversation.item.deleted"] = "conversation.item.deleted"
    item_id: str | None = None


class ConversationItemRetrieved(ServerEvent):
    type: Literal["conversation.item.retrieved"] = "conversation.item.retrieved"
    item: ConversationItem = Field(default_factory=ConversationItem)


class ConversationItemTruncated(ServerEvent):
    type: Literal["conversation.item.truncated"] = "conversation.item.truncated"
    item_id: str | None = None
    content_index: int = 0
    audio_end_ms: int | None = None


class CachedTokenDetails(_Shape):
    text_tokens: int = 0
    audio_tokens: int = 0
    image_tokens: int = 0


class InputTokenDetails(_Shape):
    text_tokens: int = 0
    audio_tokens: int = 0
    image_tokens: int = 0
    cached_tokens: int = 0
    cached_tokens_details: CachedTokenDetails | None = None


class OutputTokenDetails(_Shape):
    text_tokens: int = 0
    audio_tokens: int = 0


class Usage(_Shape):
    omittable = frozenset({"input_token_details", "output_token_details"})

    total_tokens: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    input_token_details: InputTokenDetails | None = None
    output_token_details: OutputTokenDetails | None = None


class StatusDetails(_Shape):
    """Why a response ended: `reason` (`turn_detected`, `client_cancelled`,
    `max_output_tokens`) or the `error` it failed with."""

    omittable = frozenset({"reason", "error"})

    type: str = ""
    reason: str | None = None
    error: ErrorDetail | None = None


class ResponseAudioConfig(_Shape):
    output: ResponseAudioOutput | None = None


class Response(_Shape):
    """`realtime.response`. Its `metadata` holds the client's metadata and llamactl's
    latency figures (`transcription_ms`, `first_text_ms`, `first_audio_ms`)."""

    object: Literal["realtime.response"] = "realtime.response"
    id: str | None = None
    status: Literal["in_progress", "completed", "cancelled", "failed", "incomplete"] = "completed"
    status_details: StatusDetails | None = None
    output: list[ConversationItem] = Field(default_factory=list)
    conversation_id: str | None = None
    output_modalities: list[Modality] | None = None
    max_output_tokens: int | Literal["inf"] | None = None
    audio: ResponseAudioConfig | None = None
    usage: Usage | None = None
    metadata: dict[str, str] | None = None


class ResponseCreated(ServerEvent):
    type: Literal["response.created"] = "response.created"
    response: Response = Field(default_factory=Response)


class ResponseDone(ServerEvent):
    type: Literal["response.done"] = "response.done"
    response: Response | None = None


class OutputItemAdded(ServerEvent):
    type: Literal["response.output_item.added"] = "response.output_item.added"
    response_id: str | None = None
    output_index: int = 0
    item: ConversationItem = Field(default_factory=ConversationItem)


class OutputItemDone(ServerEvent):
    type: Literal["response.output_item.done"] = "response.output_item.done"
    response_id: str | None = None
    output_index: int = 0
    item: ConversationItem = Field(default_factory=ConversationItem)


class _PartEvent(ServerEvent):
    """Events about one content part of a response's item."""

    response_id: str | None = None
    item_id: str | None = None
    output_index: int = 0
    content_index: int = 0


class ResponsePart(_Shape):
    omittable = frozenset({"text", "transcript"})

    type: Literal["text", "audio"] = "text"
    text: str | None = None
    transcript: str | None = None


class ContentPartAdded(_PartEvent):
    type: Literal["response.content_part.added"] = "response.content_part.added"
    part: ResponsePart = Field(default_factory=ResponsePart)


class ContentPartDone(_PartEvent):
    type: Literal["response.content_part.done"] = "response.content_part.done"
    part: ResponsePart = Field(default_factory=ResponsePart)


class TextDelta(_PartEvent):
    type: Literal["response.output_text.delta"] = "response.output_text.delta"
    delta: str = ""


class TextDone(_PartEvent):
    type: Literal["response.output_text.done"] = "response.output_text.done"
    text: str = ""


class AudioTranscriptDelta(_PartEvent):
    """The text of what is being said, as it is written."""

    type: Literal["response.output_audio_transcript.delta"] = (
        "response.output_audio_transcript.delta"
    )
    delta: str = ""


class AudioTranscriptDone(_PartEvent):
    type: Literal["response.output_audio_transcript.done"] = "response.output_audio_transcript.done"
    transcript: str = ""


class AudioDelta(_PartEvent):
    """`delta`: base64 PCM16 LE mono at the session's output rate (`pcm()` decodes it)."""

    type: Literal["response.output_audio.delta"] = "response.output_audio.delta"
    delta: str = ""

    def pcm(self) -> bytes:
        """The audio; ValueError when it is not base64."""
        return base64.b64decode(self.delta, validate=True)


class AudioDone(_PartEvent):
    type: Literal["response.output_audio.done"] = "response.output_audio.done"


REASONING_DELTAS = (
    "response.reasoning.delta",
    "response.reasoning_text.delta",  # the Responses API's names, read too
    "response.reasoning_summary_text.delta",
)
REASONING_DONES = (
    "response.reasoning.done",
    "response.reasoning_text.done",
    "response.reasoning_summary_text.done",
)


class ReasoningDelta(ServerEvent):
    """llamactl extension: the model's reasoning, never spoken nor kept in the item."""

    # a Literal of a tuple's names: pydantic reads it, mypy accepts only literal values
    type: Literal[REASONING_DELTAS] = "response.reasoning.delta"  # type: ignore[valid-type]
    response_id: str | None = None
    delta: str = ""


class ReasoningDone(ServerEvent):
    """llamactl extension: the whole reasoning of a response."""

    # a Literal of a tuple's names: pydantic reads it, mypy accepts only literal values
    type: Literal[REASONING_DONES] = "response.reasoning.done"  # type: ignore[valid-type]
    response_id: str | None = None
    text: str = ""


class OutputAudioBufferCleared(ServerEvent):
    """The server dropped a response's audio (barge-in by voice): stop playing it."""

    type: Literal["output_audio_buffer.cleared"] = "output_audio_buffer.cleared"
    response_id: str | None = None


class UnknownEvent(ServerEvent):
    """An event this module does not know (servers add events), or a known one holding what
    it cannot hold (`problem` says what). Its fields are kept as sent."""

    model_config = ConfigDict(extra="allow")
    problem: str | None = None

    def raw(self) -> dict[str, Any]:
        """The event's fields as they came."""
        return self.model_dump(exclude_unset=True, exclude={"problem"})


_SERVER_EVENT_CLASSES: tuple[type[ServerEvent], ...] = (
    ErrorEvent,
    SessionCreated,
    SessionUpdated,
    SpeechStarted,
    SpeechStopped,
    InputAudioBufferCommitted,
    InputAudioBufferCleared,
    InputTranscriptionDelta,
    InputTranscriptionCompleted,
    InputTranscriptionFailed,
    ConversationItemAdded,
    ConversationItemCreated,
    ConversationItemDone,
    ConversationItemDeleted,
    ConversationItemRetrieved,
    ConversationItemTruncated,
    ResponseCreated,
    ResponseDone,
    OutputItemAdded,
    OutputItemDone,
    ContentPartAdded,
    ContentPartDone,
    TextDelta,
    TextDone,
    AudioTranscriptDelta,
    AudioTranscriptDone,
    AudioDelta,
    AudioDone,
    OutputAudioBufferCleared,
)
SERVER_EVENTS: dict[str, type[ServerEvent]] = {
    cls.model_fields["type"].default: cls for cls in _SERVER_EVENT_CLASSES
}
SERVER_EVENTS.update(dict.fromkeys(REASONING_DELTAS, ReasoningDelta))
SERVER_EVENTS.update(dict.fromkeys(REASONING_DONES, ReasoningDone))


def read_server_event(data: dict[str, Any]) -> ServerEvent:
    """A decoded server event as its model, tolerantly (see the module doc); never raises:
    what cannot be read is an `UnknownEvent`."""
    kind = data.get("type")
    cls = SERVER_EVENTS.get(kind) if isinstance(kind, str) else None
    problem = None
    if cls is not None:
        try:
            return cls.model_validate(data)
        except (ValidationError, ProtocolError) as exc:
            problem = str(exc)
    fields = {k: v for k, v in data.items() if k not in ("type", "event_id", "problem")}
    event_id = data.get("event_id")
    if isinstance(event_id, str):
        fields["event_id"] = event_id
    kind = kind if isinstance(kind, str) else ""
    return UnknownEvent.model_validate({"type": kind, **fields, "problem": problem})


def check_server_event(data: dict[str, Any]) -> ServerEvent:
    """A server event as its model, strictly: known type, every field the server must send,
    no field the protocol does not have. ValueError (or ValidationError) says what is off."""
    kind = data.get("type")
    cls = SERVER_EVENTS.get(kind) if isinstance(kind, str) else None
    if cls is None or kind in REASONING_DELTAS[1:] + REASONING_DONES[1:]:
        raise ValueError(f"not a server event llamactl sends: {kind!r}")
    return cls.model_validate(data, context=_STRICT)
