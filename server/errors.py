"""API errors and their wire shapes.

OpenAI routes answer `{"error": {"code", "message", "type"}}` (llama-server's shape, which the
OpenAI SDKs read); Anthropic routes answer `{"type": "error", "error": {"type", "message"}}`.
Which shape a response takes is decided by the request path, so one exception type serves all.
Every `LlamactlError` says its own status and type (llamactl.core.errors); this module only
reads them, once, for plain answers and for the error events of each streaming API family.
"""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from llamactl import LlamactlError

from .edge.allow import allowed_methods

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "timeout_error",
    413: "request_too_large_error",
    422: "unprocessable_entity_error",
    500: "server_error",
    501: "not_supported_error",
    503: "unavailable_error",
}

# Anthropic's names for the same conditions
_ANTHROPIC_TYPES = {
    "invalid_request_error": "invalid_request_error",
    "exceed_context_size_error": "invalid_request_error",  # OVERFLOW
    "authentication_error": "authentication_error",
    "permission_error": "permission_error",
    "not_found_error": "not_found_error",
    "request_too_large_error": "request_too_large",
    "timeout_error": "timeout_error",
    "server_error": "api_error",
    "not_supported_error": "invalid_request_error",
    "unavailable_error": "overloaded_error",
}


class APIError(LlamactlError):
    """An answer whose status is chosen where it is raised (llama-server's wording and codes)."""

    def __init__(
        self,
        status: int,
        message: str,
        type_: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = self.http_status = status
        self.message = message
        self.type = self.error_type = type_ or _TYPES.get(status, "server_error")
        self._details = details or {}

    def details(self) -> dict[str, Any]:
        return self._details


def bad_request(message: str) -> APIError:
    return APIError(400, message)


def field_range_error(field: str, low: int, high: int, got: Any) -> APIError:
    """llama-server's wording for an out-of-range integer field."""
    return APIError(
        400, f"Field '{field}': Value must be between {low} <= value <= {high}, but got {got}"
    )


def is_anthropic_path(path: str) -> bool:
    return path.startswith(("/v1/messages", "/messages"))


def error_body(
    path: str, status: int, message: str, type_: str, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The API family's error body (chosen by path); OpenAI-shaped ones carry `details`.

    A message quoting the client's input may hold a lone surrogate (a `"\\ud800"` that
    json.loads let through); it is written as its escape, since it cannot be UTF-8."""
    message = message.encode("utf-8", "backslashreplace").decode("utf-8")
    overflow = type_ == OVERFLOW and details is not None and "n_ctx" in details
    if is_anthropic_path(path):
        if overflow:
            assert details is not None
            message = anthropic_overflow(details["n_prompt_tokens"], details["n_ctx"], message)
        return {
            "type": "error",
            "error": {"type": _ANTHROPIC_TYPES.get(type_, type_), "message": message},
        }
    if overflow and path.startswith(_OPENAI_PATHS):
        assert details is not None
        message = openai_overflow(details["n_prompt_tokens"], details["n_ctx"], message)
        # OpenAI's code, which agents read to compact their history; llama-server's type
        return {
            "error": {"code": "context_length_exceeded", "message": message, "type": type_}
            | {"param": "messages", **details}
        }
    return {"error": {"code": status, "message": message, "type": type_, **(details or {})}}


OVERFLOW = "exceed_context_size_error"
# OpenAI's APIs (llama-server's own endpoints keep its body: `code` 400 and its message)
_OPENAI_PATHS = (
    *("/v1/chat/completions", "/chat/completions", "/v1/completions", "/completions"),
    *("/v1/responses", "/responses"),
)


def anthropic_overflow(n_prompt: int, n_ctx: int, why: str) -> str:
    """Anthropic's words for a prompt over the context, which Claude Code reads to compact,
    then llamactl's own (what to raise, or which limit was met)."""
    return f"prompt is too long: {n_prompt} tokens > {n_ctx} maximum; {why}"


def openai_overflow(n_prompt: int, n_ctx: int, why: str) -> str:
    """OpenAI's words for it (agents match "maximum context length"), then llamactl's, which
    say llama-server's ("exceeds the available context size")."""
    return (
        f"This model's maximum context length is {n_ctx} tokens. However, your request has "
        f"{n_prompt} tokens. Please reduce the length of the messages. {why}"
    )


def error_response(
    path: str,
    status: int,
    message: str,
    type_: str | None = None,
    details: dict[str, Any] | None = None,
) -> JSONResponse:
    type_ = type_ or _TYPES.get(status, "server_error")
    return JSONResponse(error_body(path, status, message, type_, details), status_code=status)


def from_engine_error(exc: LlamactlError) -> APIError:
    """The answer an error gives, read from its class: the one mapping to HTTP."""
    if isinstance(exc, APIError):
        return exc
    return APIError(exc.http_status, str(exc), exc.error_type, exc.details())


def api_error_of(exc: BaseException) -> APIError:
    """Any failure, as the API error it is reported as (unexpected ones are a 500)."""
    if isinstance(exc, LlamactlError):
        return from_engine_error(exc)
    return APIError(500, f"internal error: {exc}")


def _validation_message(exc: RequestValidationError) -> str:
    """One line naming the first bad field, e.g. "Field 'messages.0.role': Input should be ..."."""
    parts = []
    for err in exc.errors()[:3]:
        loc = [str(x) for x in err.get("loc", ()) if x != "body"]
        msg = err.get("msg", "invalid value")
        if err.get("type") == "json_invalid":
            detail = str(err.get("ctx", {}).get("error", msg))
            if "surrogate" in detail or "hex escape" in detail:
                detail += " (a \\u escape names half of a UTF-16 surrogate pair: not Unicode text)"
            parts.append(f"Invalid JSON in the request body: {detail}")
        elif loc:
            parts.append(f"Field '{'.'.join(loc)}': {msg}")
        else:
            parts.append(msg)
    return "; ".join(parts) or "invalid request"


def install_handlers(app) -> None:
    @app.exception_handler(LlamactlError)
    async def _engine_error(request: Request, exc: LlamactlError) -> JSONResponse:
        api = from_engine_error(exc)
        return error_response(request.url.path, api.status, api.message, api.type, api.details())

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(request.url.path, 400, _validation_message(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = exc.detail if isinstance(exc.detail, str) else "error"
        headers = dict(exc.headers or {})
        if exc.status_code == 404:
            message = f"File Not Found: {request.url.path}"
        elif exc.status_code == 405:
            headers["Allow"] = allowed_methods(request.scope, request.app.router.routes)
            message = f"Method Not Allowed: {request.method} {request.url.path}"
        response = error_response(request.url.path, exc.status_code, message)
        response.headers.update(headers)
        return response

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        return error_response(request.url.path, 500, f"internal error: {exc}")
