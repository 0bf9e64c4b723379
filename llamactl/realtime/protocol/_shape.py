"""Shared pieces of the protocol's models: the strict base shape, refusals worded as clients
are told, the validation context, id and size bounds."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any, ClassVar, TypedDict

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from typing_extensions import Self

from ..errors import ProtocolError

__all__ = [
    "Context",
    "DEFAULT_RATE",
    "MAX_APPEND_BYTES",
    "MAX_EVENT_ID",
    "MAX_OUTPUT_TOKENS",
    "MAX_RATE",
    "MIN_RATE",
    "new_id",
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
