"""The OpenAPI document's error responses, as the server really answers them.

FastAPI documents a 422 `HTTPValidationError` on every route with a body or parameters, but
this server answers bad input with a 400 in the API family's own error shape (see `errors.py`),
and every API route can also answer 401 (when keys are set) and 503 (while the model loads).
Rewriting the generated document keeps clients generated from it honest.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from .errors import is_anthropic_path

_OPENAI_ERROR = {
    "title": "OpenAIError",
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type"],
            "properties": {
                # the HTTP status (llama-server), or OpenAI's code: context_length_exceeded
                "code": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
                "message": {"type": "string"},
                "type": {"type": "string"},
            },
        }
    },
}

_ANTHROPIC_ERROR = {
    "title": "AnthropicError",
    "type": "object",
    "required": ["type", "error"],
    "properties": {
        "type": {"type": "string", "const": "error"},
        "error": {
            "type": "object",
            "required": ["type", "message"],
            "properties": {"type": {"type": "string"}, "message": {"type": "string"}},
        },
    },
}

_DESCRIPTIONS = {
    "400": "Invalid request: the message names the first bad field",
    "401": "Missing or wrong API key (only when the server has keys)",
    "503": "The model is still loading, or the request queue is full",
}

# Routes the gate never refuses: health reports loading itself, metrics are for scrapers
_UNGATED = ("/health", "/metrics")


def _error_response(path: str, status: str) -> dict[str, Any]:
    name = "AnthropicError" if is_anthropic_path(path) else "OpenAIError"
    return {
        "description": _DESCRIPTIONS[status],
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}},
    }


def rewrite_error_responses(schema: dict[str, Any]) -> dict[str, Any]:
    """Replace 422s with the 400 actually sent; add 401 and 503 to gated API routes."""
    for path, operations in schema.get("paths", {}).items():
        for operation in operations.values():
            responses = operation.setdefault("responses", {})
            had_validation = responses.pop("422", None) is not None
            if had_validation and "400" not in responses:
                responses["400"] = _error_response(path, "400")
            if path.startswith(_UNGATED):
                continue
            for status in ("401", "503"):
                responses.setdefault(status, _error_response(path, status))
    schemas = schema.setdefault("components", {}).setdefault("schemas", {})
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    schemas["OpenAIError"] = _OPENAI_ERROR
    schemas["AnthropicError"] = _ANTHROPIC_ERROR
    return schema


def install(app: FastAPI) -> None:
    """Make `app.openapi()` return the rewritten document (built once, then cached)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = rewrite_error_responses(build())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
