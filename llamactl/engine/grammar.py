"""Constrained output: JSON and JSON-schema grammars for the native grammar sampler.

The schema-to-GBNF conversion is llama-cpp-python's; the grammar is then enforced token by
token by llama.cpp's grammar sampler, so the output always parses (unless cut by max_tokens).
"""

from __future__ import annotations

import json
from typing import Any

from llama_cpp import llama_grammar

from llamactl.core.errors import InvalidRequestError


def json_grammar() -> str:
    """Any JSON value (response_format json_object)."""
    return llama_grammar.JSON_GBNF


def json_schema_grammar(schema: dict[str, Any]) -> str:
    """A grammar accepting exactly the JSON documents valid for `schema`."""
    if not isinstance(schema, dict):
        raise InvalidRequestError("json_schema.schema must be an object")
    try:
        return llama_grammar.json_schema_to_gbnf(json.dumps(schema))
    except Exception as exc:  # the converter raises bare exceptions on unsupported schemas
        raise InvalidRequestError(f"unsupported JSON schema: {exc}") from exc
