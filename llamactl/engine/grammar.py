"""Constrained output: JSON and JSON-schema grammars for the native grammar sampler.

The schema-to-GBNF conversion is llama-cpp-python's; the grammar is then enforced token by
token by llama.cpp's grammar sampler, so the output always parses (unless cut by max_tokens).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from llama_cpp import llama_grammar

from llamactl.core.errors import InvalidRequestError

__all__ = [
    "NESTING_LIMIT",
    "REPEAT_LIMIT",
    "bounded_schema",
    "check_nesting",
    "json_grammar",
    "json_schema_grammar",
    "schema_to_gbnf",
]


def json_grammar() -> str:
    """Any JSON value (response_format json_object)."""
    return llama_grammar.JSON_GBNF


def json_schema_grammar(schema: dict[str, Any]) -> str:
    """A grammar accepting exactly the JSON documents valid for `schema` (upper bounds past
    REPEAT_LIMIT aside: see bounded_schema)."""
    if not isinstance(schema, dict):
        raise InvalidRequestError("json_schema.schema must be an object")
    return schema_to_gbnf(schema, "JSON schema")


def schema_to_gbnf(schema: Any, what: str) -> str:
    """llama-cpp-python's conversion of `schema` (bounded first), its failures as a 400
    naming `what`."""
    bounded = bounded_schema(schema, what)
    try:
        return llama_grammar.json_schema_to_gbnf(json.dumps(bounded))
    except Exception as exc:  # the converter raises bare exceptions on unsupported schemas
        raise InvalidRequestError(f"unsupported {what}: {exc}") from exc


# The converter writes a length or count bound n as n nested optional parts, and llama.cpp
# parses that nesting recursively: a bound of 500k (Claude Code's Workflow tool has maxLength
# 524288) overflowed the decode thread's stack and killed the server.
REPEAT_LIMIT = 512
# llama.cpp parses a grammar's parentheses recursively too: a hand-written grammar nested
# 20,000 deep crashed the server the same way
NESTING_LIMIT = 2 * REPEAT_LIMIT + 64
_UPPER = ("maxLength", "maxItems", "maxProperties")
_LOWER = ("minLength", "minItems", "minProperties")
_PATTERN_COUNT = re.compile(r"\{\s*(\d+)\s*(?:,\s*(\d*)\s*)?\}")


def bounded_schema(schema: Any, what: str = "JSON schema") -> Any:
    """`schema` with upper bounds past REPEAT_LIMIT dropped (the answer's max_tokens bounds it
    long before), and a 400 for what cannot be loosened so: a lower bound or a pattern count
    past the limit."""
    if isinstance(schema, list):
        return [bounded_schema(item, what) for item in schema]
    if not isinstance(schema, Mapping):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if key in _UPPER and number and value > REPEAT_LIMIT:
            continue
        if key in _LOWER and number and value > REPEAT_LIMIT:
            raise InvalidRequestError(
                f"{what}: {key} {value} is over the {REPEAT_LIMIT} a grammar can enforce"
            )
        if key == "pattern" and isinstance(value, str):
            _check_pattern(value, what)
        out[key] = bounded_schema(value, what) if isinstance(value, Mapping | list) else value
    return out


def _check_pattern(pattern: str, what: str) -> None:
    for low, high in _PATTERN_COUNT.findall(pattern):
        if int(low) > REPEAT_LIMIT or (high and int(high) > REPEAT_LIMIT):
            raise InvalidRequestError(
                f"{what}: the pattern repeats something more than the {REPEAT_LIMIT} times a "
                "grammar can enforce"
            )


def check_nesting(grammar: str) -> None:
    """A 400 for a GBNF grammar whose groups nest deeper than NESTING_LIMIT (llama.cpp would
    overflow its stack parsing it). Quoted literals and character classes are skipped."""
    depth = deepest = 0
    i, n = 0, len(grammar)
    while i < n:
        ch = grammar[i]
        if ch in '"[':
            close = '"' if ch == '"' else "]"
            i += 1
            while i < n and grammar[i] != close:
                i += 2 if grammar[i] == "\\" else 1
        elif ch == "#":
            while i < n and grammar[i] != "\n":
                i += 1
        elif ch == "(":
            depth += 1
            deepest = max(deepest, depth)
            if deepest > NESTING_LIMIT:
                raise InvalidRequestError(
                    f"the grammar nests groups more than {NESTING_LIMIT} deep"
                )
        elif ch == ")":
            depth = max(0, depth - 1)
        i += 1
