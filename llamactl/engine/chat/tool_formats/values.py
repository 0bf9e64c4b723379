"""Turning what a model wrote into JSON arguments.

JSON formats hand us objects that only need normalising; XML-style formats (Qwen3-Coder, GLM,
MiniMax) write every value as bare text, so the tool's schema decides whether "42" is a number
or a string, the way the model was trained to read it back.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping
from typing import Any

from llamactl.engine.chat.tool_formats.base import ParsedCall
from llamactl.engine.chat.tool_formats.cursor import NotACall

_NON_STRING = {"integer", "number", "boolean", "object", "array", "null"}
_PY_WORDS = {"True": "true", "False": "false", "None": "null"}


def arguments_object(value: Any) -> dict[str, Any]:
    """Arguments as a dict: models also write them as a JSON string, or leave them out."""
    if value is None:
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else {}
        except ValueError as exc:
            raise NotACall from exc
    if not isinstance(value, dict):
        raise NotACall
    return value


def json_call(
    value: Any,
    *,
    name_keys: tuple[str, ...] = ("name",),
    args_keys: tuple[str, ...] = ("arguments", "parameters"),
    require_args: bool = False,
) -> ParsedCall:
    """A call from a decoded {"name": ..., "arguments": ...} object (OpenAI's nested
    {"function": {...}} shape too)."""
    if not isinstance(value, dict):
        raise NotACall
    if isinstance(value.get("function"), dict):
        value = value["function"]
    name = next((value[k] for k in name_keys if k in value), None)
    if not isinstance(name, str) or not name.strip():
        raise NotACall
    key = next((k for k in args_keys if k in value), None)
    if key is None and require_args:
        raise NotACall
    return ParsedCall(name.strip(), arguments_object(value.get(key) if key else None))


def json_calls(value: Any, **keys: Any) -> list[ParsedCall]:
    """One call per object of a list (or the single object given)."""
    items = value if isinstance(value, list) else [value]
    if not items:
        raise NotACall
    return [json_call(item, **keys) for item in items]


def property_schema(parameters: Mapping[str, Any] | None, key: str) -> Mapping[str, Any] | None:
    if not parameters:
        return None
    properties = parameters.get("properties")
    if isinstance(properties, Mapping):
        found = properties.get(key)
        if isinstance(found, Mapping):
            return found
    return None


def schema_types(schema: Mapping[str, Any] | None) -> set[str]:
    """The JSON types a schema allows (looking through anyOf/oneOf and enums)."""
    if not schema:
        return set()
    declared = schema.get("type")
    if isinstance(declared, str):
        return {declared}
    if isinstance(declared, list):
        return {t for t in declared if isinstance(t, str)}
    types: set[str] = set()
    for key in ("anyOf", "oneOf"):
        for option in schema.get(key) or ():
            if isinstance(option, Mapping):
                types |= schema_types(option)
    for value in schema.get("enum") or ():
        types.add("string" if isinstance(value, str) else "any")
    if "const" in schema:
        types.add("string" if isinstance(schema["const"], str) else "any")
    return types


def convert_value(raw: str, schema: Mapping[str, Any] | None) -> Any:
    """A bare-text value typed by its schema; without one, JSON if it parses, else the text."""
    types = schema_types(schema)
    if "string" in types and not (types & _NON_STRING and _decodes(raw)):
        return raw
    text = raw.strip()
    try:
        return json.loads(text)
    except ValueError:
        pass
    if text in _PY_WORDS:
        return json.loads(_PY_WORDS[text])
    if types & {"object", "array"}:
        try:  # Python-style literals ({'a': 1}) are a common slip
            value = ast.literal_eval(text)
            return json.loads(json.dumps(value))
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            pass
    return raw


def _decodes(raw: str) -> bool:
    try:
        json.loads(raw)
    except ValueError:
        return False
    return True
