"""The Realtime GA protocol as llamactl speaks it: one definition for the server, the client
and the tests' fake server.

Shapes are openai-python's `types/realtime/` (GA). llamactl's extensions are marked where
they are defined: `response.reasoning.delta` / `.done`, `audio_start_ms` / `audio_end_ms` on
`input_audio_buffer.committed`, `temperature` on sessions, input and output rates other
than 24 kHz.

The two directions are read differently:

- **Client events** are validated by the server (`parse`). A refusal is a `ProtocolError`
  naming the field in `param`, worded as clients have always been told; validation stops at
  the first one, in field order. A `session.update` body is partial: a field left out keeps
  its value (read `model_fields_set`). Checks that need the server's state (which models
  exist) get it through the validation context (`Context`).
- **Server events** are read by clients tolerantly (`read_server_event`: a missing field gets
  its default, an unknown event is an `UnknownEvent`, as servers add events) and checked
  strictly by `check_server_event` (every field the server must send is there, no unknown
  ones), which is how tests hold both the server and the fake to this module.
"""

from __future__ import annotations

import base64
import binascii
import secrets
from collections.abc import Callable
from typing import Annotated, Any, ClassVar, Literal, TypedDict

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from typing_extensions import Self

from .errors import ProtocolError

__all__ = [
    "CLIENT_EVENTS",
    "DEFAULT_RATE",
    "MAX_APPEND_BYTES",
    "MAX_EVENT_ID",
    "MAX_OUTPUT_TOKENS",
    "MAX_RATE",
    "MIN_RATE",
    "SERVER_EVENTS",
    "AudioDelta",
    "AudioDone",
    "AudioFormat",
    "AudioInput",
    "AudioOutput",
    "AudioTranscriptDelta",
    "AudioTranscriptDone",
    "ClientEvent",
    "ContentPart",
    "ContentPartAdded",
    "ContentPartDone",
    "Context",
    "ConversationItem",
    "ConversationItemAdded",
    "ConversationItemCreate",
    "ConversationItemCreated",
    "ConversationItemDelete",
    "ConversationItemDeleted",
    "ConversationItemDone",
    "ConversationItemRetrieve",
    "ConversationItemRetrieved",
    "ConversationItemTruncate",
    "ConversationItemTruncated",
    "ErrorEvent",
    "InputAudioBufferAppend",
    "InputAudioBufferClear",
    "InputAudioBufferCleared",
    "InputAudioBufferCommit",
    "InputAudioBufferCommitted",
    "InputTranscription",
    "InputTranscriptionCompleted",
    "InputTranscriptionDelta",
    "InputTranscriptionFailed",
    "ItemReference",
    "NewItem",
    "OutputAudioBufferClear",
    "OutputAudioBufferCleared",
    "OutputItemAdded",
    "OutputItemDone",
    "RealtimeError",
    "RealtimeSession",
    "ReasoningDelta",
    "ReasoningDone",
    "Response",
    "ResponseCancel",
    "ResponseCreate",
    "ResponseCreated",
    "ResponseDone",
    "ResponseParams",
    "ServerEvent",
    "SessionCreated",
    "SessionUpdate",
    "SessionUpdated",
    "SpeechStarted",
    "SpeechStopped",
    "TextDelta",
    "TextDone",
    "TranscriptionSession",
    "TurnDetection",
    "UnknownEvent",
    "Usage",
    "check_server_event",
    "decode_audio",
    "encode_audio",
    "error_event",
    "new_id",
    "read_server_event",
]

DEFAULT_RATE = 24000  # OpenAI's fixed rate; other rates are accepted as an extension
MIN_RATE, MAX_RATE = 8000, 48000
MAX_OUTPUT_TOKENS = 4096  # OpenAI's bound for an integer max_output_tokens
MAX_APPEND_BYTES = 15 * 1024 * 1024  # OpenAI's limit for one append
MAX_EVENT_ID = 512  # longer client event ids are not echoed back in errors
MAX_ITEM_ID = 64
MAX_METADATA = 16


def new_id(prefix: str) -> str:
    """A fresh id in OpenAI's style (`event_…`, `item_…`, `resp_…`, `sess_…`)."""
    return prefix + secrets.token_urlsafe(16).replace("-", "a").replace("_", "b")[:22]


class Context(TypedDict, total=False):
    """What the server knows that a client event is checked against (`parse(..., context)`)."""

    transcribers: set[str]  # transcription model names a session may ask for
    transcriber: str  # ... and the one it gets
    models: set[str]  # conversation model names
    model: str


_STRICT = {"strict": True}


# ----------------------------------------------------------------------------- base
class _Shape(BaseModel):
    """A protocol object. Unknown fields are ignored when reading (servers add fields);
    under `check_server_event` they are refused, and so is a missing field that is not in
    `omittable`."""

    model_config = ConfigDict(extra="ignore")
    omittable: ClassVar[frozenset[str]] = frozenset()

    @model_validator(mode="before")
    @classmethod
    def _conforms(cls, data: Any, info: ValidationInfo) -> Any:
        if isinstance(data, dict) and info.context and info.context.get("strict"):
            missing = [k for k in cls.model_fields if k not in data and k not in cls.omittable]
            unknown = [k for k in data if k not in cls.model_fields]
            if missing or unknown:
                raise ValueError(f"{cls.__name__}: missing {missing}, unknown {unknown}")
        return data

    @classmethod
    def parse(cls, data: Any, context: Context | None = None) -> Self:
        """Validate a client's value; every refusal is a ProtocolError."""
        try:
            return cls.model_validate(data, context=context)
        except ValidationError as exc:  # a shape no validator below words: say where
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or None
            raise ProtocolError(f"{where}: {first['msg']}", param=where) from None


def _refuse(message: str, param: str, code: str = "invalid_value") -> ProtocolError:
    return ProtocolError(message, param=param, code=code)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check(fn: Callable[..., Any], *args: Any) -> BeforeValidator:
    """A field check `fn(value, *args)` run on the value as sent."""
    return BeforeValidator(lambda value: fn(value, *args))


def _object(value: Any, param: str, what: str = "an object") -> Any:
    if value is not None and not isinstance(value, dict | BaseModel):
        raise _refuse(f"{param} must be {what}", param)
    return value


def _string(value: Any, param: str) -> Any:
    if value is not None and not isinstance(value, str):
        raise _refuse(f"{param} must be a string", param)
    return value


def _context(info: ValidationInfo) -> dict[str, Any]:
    return info.context if isinstance(info.context, dict) else {}


# ---------------------------------------------------------------------- audio formats
class AudioFormat(_Shape):
    """`{"type": "audio/pcm", "rate": R}`: PCM16 LE mono (any R from 8000 to 48000 is an
    extension). Where it is (`at`) and which way it goes word the refusals."""

    at: ClassVar[str] = "session.audio.input.format"
    direction: ClassVar[str] = "input"

    type: Literal["audio/pcm"] = "audio/pcm"
    rate: int = DEFAULT_RATE

    @model_validator(mode="before")
    @classmethod
    def _pcm_only(cls, data: Any) -> Any:
        if isinstance(data, dict):
            kind = data.get("type", "audio/pcm")
            if kind != "audio/pcm":
                verb = "send" if cls.direction == "input" else "use"
                raise _refuse(
                    f"{cls.direction} audio format '{kind}' is not supported; {verb} audio/pcm "
                    "(PCM16 LE mono)",
                    f"{cls.at}.type",
                )
            if "rate" in data:
                rate = data["rate"]
                if not _is_int(rate) or not MIN_RATE <= rate <= MAX_RATE:
                    raise _refuse(
                        f"{cls.at}.rate must be an integer between {MIN_RATE} and {MAX_RATE}, "
                        f"got {rate!r}",
                        f"{cls.at}.rate",
                    )
        return data


class OutputFormat(AudioFormat):
    at = "session.audio.output.format"
    direction = "output"


class ResponseOutputFormat(OutputFormat):
    at = "response.audio.output.format"


# ------------------------------------------------------------------ session: input
def _transcription_model(value: Any, info: ValidationInfo) -> Any:
    ctx = _context(info)
    known = ctx.get("transcribers")
    if known is not None and value not in (None, "") and value not in known:
        raise _refuse(
            f"unknown transcription model '{value}'; this server transcribes with "
            f"'{ctx.get('transcriber', '')}'",
            f"{InputTranscription.at}.model",
        )
    return value


class InputTranscription(_Shape):
    """`audio.input.transcription`: the model is the server's (OpenAI names are accepted)."""

    at: ClassVar[str] = "session.audio.input.transcription"

    model: Annotated[str | None, BeforeValidator(_transcription_model)] = None
    language: Annotated[str | None, _check(_string, f"{at}.language")] = None
    prompt: Annotated[str | None, _check(_string, f"{at}.prompt")] = None


_TD = "session.audio.input.turn_detection"
_VAD_BOUNDS: dict[str, tuple[float, float, float]] = {
    "threshold": (0.0, 1.0, 0.5),
    "prefix_padding_ms": (0, 5000, 300),
    "silence_duration_ms": (100, 10000, 500),
}


def _vad(value: Any, key: str) -> Any:
    low, high, default = _VAD_BOUNDS[key]
    got = default if value is None else value
    if not _is_number(got) or not low <= got <= high:
        raise _refuse(f"{_TD}.{key} must be between {low} and {high}, got {got!r}", f"{_TD}.{key}")
    return got if key == "threshold" else int(got)


def _kind_of_vad(value: Any) -> Any:
    if value != "server_vad":
        raise _refuse(
            f"turn detection '{value}' is not supported; use server_vad or null", f"{_TD}.type"
        )
    return value


class TurnDetection(_Shape):
    """`server_vad` (`semantic_vad` is refused). In transcription sessions the conversation
    settings (`create_response`...) are kept as sent and mean nothing."""

    omittable = frozenset({"create_response", "interrupt_response", "idle_timeout_ms"})

    type: Annotated[Literal["server_vad"], BeforeValidator(_kind_of_vad)] = "server_vad"
    threshold: Annotated[int | float, _check(_vad, "threshold")] = 0.5
    prefix_padding_ms: Annotated[int, _check(_vad, "prefix_padding_ms")] = 300
    silence_duration_ms: Annotated[int, _check(_vad, "silence_duration_ms")] = 500
    create_response: Any = None
    interrupt_response: Any = None
    idle_timeout_ms: Any = None


def _boolean(value: Any, key: str) -> Any:
    if not isinstance(value, bool):
        raise _refuse(f"{_TD}.{key} must be a boolean", f"{_TD}.{key}")
    return value


class ConversationTurnDetection(TurnDetection):
    """Conversation sessions: a committed turn is answered (`create_response`) and speech
    over an answer interrupts it (`interrupt_response`); left out, each keeps its value."""

    create_response: Annotated[bool | None, _check(_boolean, "create_response")] = None
    interrupt_response: Annotated[bool | None, _check(_boolean, "interrupt_response")] = None


class AudioInput(_Shape):
    """`audio.input`. `noise_reduction` is accepted and not acted on (reported as null)."""

    format: Annotated[AudioFormat | None, _check(_object, f"{AudioFormat.at}")] = None
    transcription: Annotated[InputTranscription | None, _check(_object, InputTranscription.at)] = (
        None
    )
    turn_detection: Annotated[TurnDetection | None, _check(_object, _TD, "an object or null")] = (
        None
    )
    noise_reduction: Any = None


class ConversationAudioInput(AudioInput):
    turn_detection: Annotated[
        ConversationTurnDetection | None, _check(_object, _TD, "an object or null")
    ] = None


# ----------------------------------------------------------------- session: output
def _voice(value: Any, param: str) -> Any:
    if value is None:
        return None
    voice = value.get("id") if isinstance(value, dict) else value
    if not isinstance(voice, str) or not voice:
        raise _refuse(f"{param} must be a voice name", param)
    return voice


def _speed(value: Any, param: str) -> Any:
    if value is None:
        return None
    if not _is_number(value) or not 0.25 <= value <= 4:
        raise _refuse(f"{param} must be between 0.25 and 4, got {value!r}", param)
    return float(value)


class AudioOutput(_Shape):
    """`audio.output` of a session: spoken answers (eSpeak NG voices; OpenAI's names map to
    them); `{"id": name}` voices are read as their name."""

    format: Annotated[OutputFormat | None, _check(_object, OutputFormat.at)] = None
    voice: Annotated[str | None, _check(_voice, "session.audio.output.voice")] = None
    speed: Annotated[float | None, _check(_speed, "session.audio.output.speed")] = None


class ResponseAudioOutput(AudioOutput):
    """`response.audio.output`: one response's voice (the response object omits speed)."""

    omittable = frozenset({"speed"})

    format: Annotated[ResponseOutputFormat | None, _check(_object, ResponseOutputFormat.at)] = None
    voice: Annotated[str | None, _check(_voice, "response.audio.output.voice")] = None
    speed: Annotated[float | None, _check(_speed, "response.audio.output.speed")] = None


# ------------------------------------------------- output fields: sessions and responses
Modality = Literal["text", "audio"]


def _modalities(value: Any, param: str) -> Any:
    if value is None or value in (["text"], ["audio"]):
        return value
    if isinstance(value, list) and sorted(value) == ["audio", "text"]:
        return ["audio"]  # OpenAI: audio output always carries its text transcript
    raise _refuse(f'{param} must be ["text"] or ["audio"], got {value!r}', param)


def _max_tokens(value: Any, where: str) -> Any:
    if value is None or value == "inf":
        return "inf"
    if not _is_int(value) or not 1 <= value <= MAX_OUTPUT_TOKENS:
        raise _refuse(
            f"{where}.max_output_tokens must be an integer from 1 to {MAX_OUTPUT_TOKENS} or "
            f"'inf', got {value!r}",
            f"{where}.max_output_tokens",
        )
    return value


def _temperature(value: Any, where: str) -> Any:
    if value is None:
        return None
    if not _is_number(value) or not 0.0 <= value <= 2.0:
        raise _refuse(
            f"{where}.temperature must be between 0 and 2, got {value!r}", f"{where}.temperature"
        )
    return float(value)


def _no_tools(value: Any, param: str, what: str) -> Any:
    if value not in (None, [], "auto", "none"):
        raise _refuse(
            f"function tools are not supported in realtime {what} yet",
            param,
            code="unsupported_feature",
        )
    return value


def _include(value: Any) -> Any:
    value = value or []
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise _refuse("session.include must be a list of strings", "session.include")
    return value


# ------------------------------------------------------------------------- sessions
class TranscriptionAudio(_Shape):
    input: Annotated[AudioInput | None, _check(_object, "session.audio.input")] = None


class TranscriptionSession(_Shape):
    """`session.type: "transcription"`: a `session.update` body (partial) or, sent by the
    server, the whole effective session."""

    object: Literal["realtime.session"] = "realtime.session"
    type: Literal["transcription"] | None = "transcription"
    id: str | None = None
    audio: Annotated[TranscriptionAudio | None, _check(_object, "session.audio")] = None
    include: Annotated[list[str] | None, BeforeValidator(_include)] = None


class ConversationAudio(_Shape):
    input: Annotated[ConversationAudioInput | None, _check(_object, "session.audio.input")] = None
    output: Annotated[AudioOutput | None, _check(_object, "session.audio.output")] = None


def _session_model(value: Any, info: ValidationInfo) -> Any:
    ctx = _context(info)
    known = ctx.get("models")
    if known is not None and value not in (None, "") and value not in known:
        raise _refuse(
            f"unknown model '{value}'; this server answers with '{ctx.get('model', '')}'",
            "session.model",
        )
    return value


class RealtimeSession(_Shape):
    """`session.type: "realtime"`, a conversation: speech (or text) in, answers out.
    `temperature` is a llamactl extension (null: the server's default)."""

    object: Literal["realtime.session"] = "realtime.session"
    type: Literal["realtime"] | None = "realtime"
    id: str | None = None
    audio: Annotated[ConversationAudio | None, _check(_object, "session.audio")] = None
    include: Annotated[list[str] | None, BeforeValidator(_include)] = None
    model: Annotated[str | None, BeforeValidator(_session_model)] = None
    tools: Annotated[
        list[Any] | None, _check(_no_tools, "session.tools", "conversation sessions")
    ] = None
    tool_choice: Annotated[
        str | None, _check(_no_tools, "session.tool_choice", "conversation sessions")
    ] = None
    output_modalities: Annotated[
        list[Modality] | None, _check(_modalities, "session.output_modalities")
    ] = None
    instructions: Annotated[str | None, _check(_string, "session.instructions")] = None
    max_output_tokens: Annotated[int | Literal["inf"] | None, _check(_max_tokens, "session")] = None
    temperature: Annotated[float | None, _check(_temperature, "session")] = None
    tracing: Any = None
    truncation: Any = None


def _session_kind(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return "transcription" if kind == "transcription" else "realtime"


Session = Annotated[
    Annotated[RealtimeSession, Tag("realtime")]
    | Annotated[TranscriptionSession, Tag("transcription")],
    Discriminator(_session_kind),
]


# ---------------------------------------------------------------------------- items
class ContentPart(_Shape):
    """One part of a message item: `input_text` / `output_text` (`text`), `input_audio` /
    `output_audio` (`transcript`; `audio` is base64 PCM16, sent by clients only)."""

    omittable = frozenset({"text", "transcript", "audio"})

    type: str
    text: str | None = None
    transcript: str | None = None
    audio: Any = None  # checked where it is decoded (`decode_audio`)


class ConversationItem(_Shape):
    """A message item as the server reports it (`realtime.item`)."""

    id: str | None = None
    object: Literal["realtime.item"] = "realtime.item"
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system"] | None = None
    status: Literal["completed", "incomplete", "in_progress"] | None = None
    content: list[ContentPart] = Field(default_factory=list)

    @property
    def text(self) -> str:
        """The item's typed text (text parts), empty for audio parts."""
        return "".join(p.text or "" for p in self.content if "text" in p.model_fields_set)


_ALLOWED_PARTS = {
    "user": {"input_text", "input_audio"},
    "system": {"input_text"},
    "assistant": {"output_text", "output_audio", "text"},
}


def _item_kind(value: Any) -> Any:
    kind = "message" if value is None else value
    if kind != "message":
        raise _refuse(
            f"item type '{kind}' is not supported (function calls need tools, which "
            "realtime sessions do not have yet); send message items",
            "item.type",
            code="unsupported_feature",
        )
    return kind


def _item_role(value: Any) -> Any:
    if value not in _ALLOWED_PARTS:
        raise _refuse("item.role must be 'user', 'assistant' or 'system'", "item.role")
    return value


def _item_id(value: Any) -> Any:
    if not value:
        return None  # the server names it
    if not isinstance(value, str) or len(value) > MAX_ITEM_ID:
        raise _refuse(f"item.id must be a string of at most {MAX_ITEM_ID} characters", "item.id")
    return value


def _part_text(part: dict[str, Any], key: str, param: str) -> str:
    value = part.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _refuse(f"{param}.{key} must be a string", f"{param}.{key}")
    return value


def _item_content(value: Any, info: ValidationInfo) -> Any:
    """Parts as sent, reduced to what is read: the text, a transcript, or audio to decode."""
    if not isinstance(value, list) or not value:
        raise _refuse("item.content must be a non-empty list", "item.content")
    role = info.data["role"]  # validated first: a refused role stops validation there
    allowed = _ALLOWED_PARTS[role]
    parts: list[dict[str, Any]] = []
    for n, part in enumerate(value):
        param = f"item.content[{n}]"
        if not isinstance(part, dict) or part.get("type") not in allowed:
            raise _refuse(
                f"{param}.type must be one of {sorted(allowed)} for a {role} message",
                f"{param}.type",
            )
        kind = part["type"]
        if kind == "input_audio":
            if part.get("transcript"):
                parts.append({"type": kind, "transcript": _part_text(part, "transcript", param)})
            else:
                parts.append({"type": kind, "audio": part.get("audio")})
        elif kind == "output_audio":
            parts.append({"type": kind, "transcript": _part_text(part, "transcript", param)})
        else:
            parts.append({"type": kind, "text": _part_text(part, "text", param)})
    return parts


class NewItem(_Shape):
    """A message item a client adds (`conversation.item.create`, `response.input`): user
    text or audio, system text, assistant text or transcripts. Function calls are refused
    (realtime sessions have no tools yet)."""

    type: Annotated[Literal["message"], BeforeValidator(_item_kind)] = "message"
    role: Annotated[Literal["user", "assistant", "system"], BeforeValidator(_item_role)] = Field(
        default=None, validate_default=True
    )
    id: Annotated[str | None, BeforeValidator(_item_id)] = None
    content: Annotated[list[ContentPart], BeforeValidator(_item_content)] = Field(
        default=None,
        validate_default=True,
    )


def _reference_id(value: Any) -> Any:
    if value is not None and not isinstance(value, str):
        raise ProtocolError(
            f"no conversation item with id '{value}'", code="item_not_found", param="item_id"
        )
    return value


ItemId = Annotated[str | None, BeforeValidator(_reference_id)]


class ItemReference(_Shape):
    """`{"type": "item_reference", "id": ...}` in `response.input`: an existing item."""

    type: Literal["item_reference"] = "item_reference"
    id: ItemId = None


def _input_kind(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return "reference" if kind == "item_reference" else "item"


ResponseInput = Annotated[
    Annotated[NewItem, Tag("item")] | Annotated[ItemReference, Tag("reference")],
    Discriminator(_input_kind),
]


# -------------------------------------------------------------------- client events
def _event_id(value: Any) -> Any:
    return value if isinstance(value, str) and len(value) <= MAX_EVENT_ID else None


class ClientEvent(_Shape):
    """Every client event: a `type` and an optional `event_id` (echoed in errors; a
    non-string or one over `MAX_EVENT_ID` characters is dropped)."""

    type: str
    event_id: Annotated[str | None, BeforeValidator(_event_id)] = None

    def wire(self) -> dict[str, Any]:
        """The event as sent: its type, its id, and the fields that were set."""
        data = self.model_dump(mode="json", exclude_unset=True, exclude={"type", "event_id"})
        head = {"type": self.type}
        if self.event_id is not None:
            head["event_id"] = self.event_id
        return head | data


def _session_body(value: Any) -> Any:
    if not isinstance(value, dict):
        raise _refuse("session.update needs a 'session' object", "session")
    return value


class SessionUpdate(ClientEvent):
    """The body is read by the session kind it is for (`TranscriptionSession` or
    `RealtimeSession`): `type` picks it, left out it is the session's own."""

    type: Literal["session.update"] = "session.update"
    session: Annotated[dict[str, Any], BeforeValidator(_session_body)] = Field(
        default=None,
        validate_default=True,
    )


def _append_audio(value: Any) -> Any:
    if not isinstance(value, str):
        raise _refuse("input_audio_buffer.append needs 'audio': base64 PCM16 LE mono", "audio")
    return value


class InputAudioBufferAppend(ClientEvent):
    type: Literal["input_audio_buffer.append"] = "input_audio_buffer.append"
    audio: Annotated[str, BeforeValidator(_append_audio)] = Field(
        default=None,
        validate_default=True,
    )


class InputAudioBufferCommit(ClientEvent):
    type: Literal["input_audio_buffer.commit"] = "input_audio_buffer.commit"


class InputAudioBufferClear(ClientEvent):
    type: Literal["input_audio_buffer.clear"] = "input_audio_buffer.clear"


def _item_object(value: Any) -> Any:
    if not isinstance(value, dict | BaseModel):
        raise _refuse("conversation.item.create needs an 'item' object", "item")
    return value


def _previous_id(value: Any) -> Any:
    if value is not None and not isinstance(value, str):
        raise _refuse("previous_item_id must be a string", "previous_item_id")
    return value


class ConversationItemCreate(ClientEvent):
    """Adds `item` after `previous_item_id` (left out: at the end; `"root"`: first)."""

    type: Literal["conversation.item.create"] = "conversation.item.create"
    item: Annotated[NewItem, BeforeValidator(_item_object)] = Field(
        default=None,
        validate_default=True,
    )
    previous_item_id: Annotated[str | None, BeforeValidator(_previous_id)] = None


class ConversationItemDelete(ClientEvent):
    type: Literal["conversation.item.delete"] = "conversation.item.delete"
    item_id: ItemId = None


class ConversationItemRetrieve(ClientEvent):
    type: Literal["conversation.item.retrieve"] = "conversation.item.retrieve"
    item_id: ItemId = None


def _audio_end(value: Any) -> Any:
    if not _is_int(value) or value < 0:
        raise _refuse("audio_end_ms must be an integer >= 0", "audio_end_ms")
    return value


def _content_zero(value: Any) -> Any:
    if value != 0:
        raise _refuse("content_index must be 0", "content_index")
    return value


class ConversationItemTruncate(ClientEvent):
    """The assistant item was heard only up to `audio_end_ms` (barge-in)."""

    type: Literal["conversation.item.truncate"] = "conversation.item.truncate"
    item_id: ItemId = None
    audio_end_ms: Annotated[int, BeforeValidator(_audio_end)] = Field(
        default=None,
        validate_default=True,
    )
    content_index: Annotated[int, BeforeValidator(_content_zero)] = 0


def _conversation(value: Any) -> Any:
    if value not in (None, "auto", "none"):
        raise _refuse("response.conversation must be 'auto' or 'none'", "response.conversation")
    return value


def _metadata(value: Any) -> Any:
    if value is None:
        return None
    if (
        not isinstance(value, dict)
        or len(value) > MAX_METADATA
        or not all(isinstance(k, str) and len(k) <= 64 for k in value)
        or not all(isinstance(v, str) and len(v) <= 512 for v in value.values())
    ):
        raise _refuse(
            "response.metadata must map at most 16 keys (64 characters) to strings (512)",
            "response.metadata",
        )
    return value


def _inputs(value: Any) -> Any:
    if value is None:
        return None
    if not isinstance(value, list):
        raise _refuse("response.input must be a list of items", "response.input")
    for n, raw in enumerate(value):
        if not isinstance(raw, dict | BaseModel):
            raise _refuse(f"response.input[{n}] must be an item", "response.input")
    return value


class ResponseAudio(_Shape):
    output: Annotated[ResponseAudioOutput | None, _check(_object, "response.audio.output")] = None


class ResponseParams(_Shape):
    """`response.create`'s `response`: overrides of the session's output for one response.
    `conversation: "none"` makes an out-of-band response; `input` replaces the conversation
    as the response's context."""

    output_modalities: Annotated[
        list[Modality] | None, _check(_modalities, "response.output_modalities")
    ] = None
    instructions: Annotated[str | None, _check(_string, "response.instructions")] = None
    max_output_tokens: Annotated[int | Literal["inf"] | None, _check(_max_tokens, "response")] = (
        None
    )
    temperature: Annotated[float | None, _check(_temperature, "response")] = None
    audio: Annotated[ResponseAudio | None, _check(_object, "response.audio")] = None
    tools: Annotated[list[Any] | None, _check(_no_tools, "response.tools", "responses")] = None
    tool_choice: Annotated[str | None, _check(_no_tools, "response.tool_choice", "responses")] = (
        None
    )
    conversation: Annotated[Literal["auto", "none"] | None, BeforeValidator(_conversation)] = None
    metadata: Annotated[dict[str, str] | None, BeforeValidator(_metadata)] = None
    input: Annotated[list[ResponseInput] | None, BeforeValidator(_inputs)] = None


def _response_params(value: Any) -> Any:
    if not value:
        return {}
    if not isinstance(value, dict | BaseModel):
        raise _refuse("response must be an object", "response")
    return value


class ResponseCreate(ClientEvent):
    type: Literal["response.create"] = "response.create"
    response: Annotated[ResponseParams, BeforeValidator(_response_params)] = Field(
        default_factory=ResponseParams
    )


def _response_id(value: Any) -> Any:
    if value is None or isinstance(value, str):
        return value or None
    return str(value) if value else None


class ResponseCancel(ClientEvent):
    """Cancels `response_id`, or (left out) the conversation's active response."""

    type: Literal["response.cancel"] = "response.cancel"
    response_id: Annotated[str | None, BeforeValidator(_response_id)] = None


class OutputAudioBufferClear(ClientEvent):
    """Stop what is being said (a barge-in the client noticed)."""

    type: Literal["output_audio_buffer.clear"] = "output_audio_buffer.clear"


CLIENT_EVENTS: dict[str, type[ClientEvent]] = {
    cls.model_fields["type"].default: cls
    for cls in (
        SessionUpdate,
        InputAudioBufferAppend,
        InputAudioBufferCommit,
        InputAudioBufferClear,
        ConversationItemCreate,
        ConversationItemDelete,
        ConversationItemRetrieve,
        ConversationItemTruncate,
        ResponseCreate,
        ResponseCancel,
        OutputAudioBufferClear,
    )
}


# --------------------------------------------------------------------- audio payloads
def encode_audio(pcm: bytes) -> str:
    """PCM16 LE mono as an event's base64 `audio` / `delta`."""
    return base64.b64encode(pcm).decode("ascii")


def decode_audio(audio: Any) -> bytes:
    """A client's base64 PCM16 (an append, or an item's `input_audio`), or ProtocolError."""
    _append_audio(audio)
    if len(audio) > MAX_APPEND_BYTES * 4 // 3 + 4:
        raise _refuse("one append holds at most 15 MiB of audio", "audio")
    try:
        data = base64.b64decode(audio, validate=True)
    except (binascii.Error, ValueError):
        raise _refuse("'audio' is not valid base64", "audio") from None
    if len(data) % 2:
        raise _refuse("PCM16 audio must have an even number of bytes", "audio")
    return data


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
    error = {"type": type_, "code": code, "message": message, "param": param}
    return ErrorEvent.build(error={**error, "event_id": event_id}).wire()


def refusal_event(exc: ProtocolError, event_id: str | None = None) -> dict[str, Any]:
    """The `error` event for a refused client event (`event_id`: the refused event's id)."""
    return error_event(
        exc.message, type_=exc.type, code=exc.code, param=exc.param, event_id=event_id
    )


class SessionCreated(ServerEvent):
    type: Literal["session.created"] = "session.created"
    session: Session = Field(default_factory=RealtimeSession)


class SessionUpdated(ServerEvent):
    type: Literal["session.updated"] = "session.updated"
    session: Session = Field(default_factory=RealtimeSession)


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
