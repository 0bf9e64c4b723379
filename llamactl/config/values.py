"""One setting's value, checked against its field's type by pydantic.

Values from TOML and Python keep their type (an integer setting refuses `true` and `"8"`);
text from environment variables and string flags is parsed (`"8"`, `"yes"`, `"a, b"`). Errors
say what was expected in the user's words, not pydantic's; the caller adds where the value came
from. Bounds are not checked here: they apply to the merged result (`load_settings`).
"""

from __future__ import annotations

import functools
import os
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import TypeAdapter, ValidationError

from .fields import setting_fields

__all__ = ["BadValue", "check_value", "describe", "setting_type"]

_BOOL_WORDS = frozenset({"1", "true", "yes", "on", "0", "false", "no", "off"})


class BadValue(Exception):
    """A value that does not fit its setting's type; the caller adds where it came from."""


def setting_type(name: str) -> Any:
    """The field's type without its bounds (`int | None`, `list[str]`, a Literal...)."""
    return setting_fields()[name].annotation


def describe(value: Any) -> str:
    kind = {bool: "boolean", int: "integer", float: "float", str: "string"}.get(type(value))
    if kind is None:
        kind = "table" if isinstance(value, Mapping) else type(value).__name__
    return f"{kind} {value!r}"


def check_value(name: str, value: Any, *, from_text: bool) -> Any:
    """`value` as setting `name` holds it; BadValue when it does not fit."""
    hint = setting_type(name)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):  # X | None
        if value is None:
            return None
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    prepared = _prepare(value, hint, from_text=from_text)
    try:
        checked = _adapter(hint).validate_python(prepared, strict=not from_text)
    except ValidationError:
        got = repr(value) if from_text and isinstance(value, str) else describe(value)
        raise BadValue(f"expected {_expected(hint)}, got {got}") from None
    return checked.expanduser() if isinstance(checked, Path) else checked


@functools.cache
def _adapter(hint: Any) -> TypeAdapter[Any]:
    return TypeAdapter(hint)


def _prepare(value: Any, hint: Any, *, from_text: bool) -> Any:
    """What pydantic cannot guess: lists from text or one string, on/off from booleans,
    paths from strings, case-insensitive choices."""
    origin = typing.get_origin(hint)
    if origin is list:
        if isinstance(value, str):
            return [p.strip() for p in value.split(",") if p.strip()] if from_text else [value]
        return list(value) if isinstance(value, tuple) else value
    if origin is dict and isinstance(value, Mapping):
        for k, v in value.items():
            if not isinstance(v, (str, os.PathLike)):
                raise BadValue(f"expected a string for {k!r}, got {describe(v)}")
        return {str(k): os.fspath(v) for k, v in value.items()}
    if origin is Literal:
        return _choice(value, typing.get_args(hint), from_text=from_text)
    if hint is Path and isinstance(value, (str, os.PathLike)):
        return Path(value)
    if from_text and isinstance(value, str):
        text = value.strip()
        if hint is bool and text.lower() not in _BOOL_WORDS:
            return value  # pydantic would also take "t" or "y"; refused as before
        return text
    return value


def _choice(value: Any, choices: tuple[str, ...], *, from_text: bool) -> Any:
    """One of `choices`; booleans map to "on"/"off" when those are choices (flash_attn)."""
    if isinstance(value, str) and value.strip().lower() in choices:
        return value.strip().lower()
    if {"on", "off"} <= set(choices):
        if isinstance(value, bool):
            return "on" if value else "off"
        if from_text and isinstance(value, str) and value.strip().lower() in _BOOL_WORDS:
            return "on" if _adapter(bool).validate_python(value.strip()) else "off"
    return value


def _expected(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if origin is Literal:
        return "one of " + ", ".join(repr(c) for c in typing.get_args(hint))
    if origin is list:
        return "a string or a list of strings"
    if origin is dict:
        return "a table"
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    return names.get(hint, "a path string")
