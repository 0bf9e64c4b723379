"""Client events (validated by the server) and the base64 audio they carry."""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    Field,
)

from ._shape import (
    MAX_APPEND_BYTES,
    MAX_EVENT_ID,
    MAX_METADATA,
    _check,
    _is_int,
    _object,
    _refuse,
    _Shape,
    _string,
)
from .items import ItemId, NewItem, ResponseInput
from .session import (
    Modality,
    ResponseAudioOutput,
    _max_tokens,
    _modalities,
    _no_tools,
    _reasoning_budget,
    _temperature,
)

__all__ = [
    "CLIENT_EVENTS",
    "ClientEvent",
    "ConversationItemCreate",
    "ConversationItemDelete",
    "ConversationItemRetrieve",
    "ConversationItemTruncate",
    "InputAudioBufferAppend",
    "InputAudioBufferClear",
    "InputAudioBufferCommit",
    "OutputAudioBufferClear",
    "ResponseCancel",
    "ResponseCreate",
    "ResponseParams",
    "SessionUpdate",
    "decode_audio",
    "encode_audio",
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
    reasoning_budget: Annotated[int | None, _check(_reasoning_budget, "response")] = None
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
