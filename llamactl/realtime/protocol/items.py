"""Conversation items: content parts, items as the server keeps them, items a client sends,
and references to items."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Discriminator,
    Field,
    Tag,
    ValidationInfo,
)

from ..errors import ProtocolError
from ._shape import MAX_ITEM_ID, _refuse, _Shape

__all__ = [
    "ContentPart",
    "ConversationItem",
    "ItemReference",
    "NewItem",
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
