"""Request preparation off the event loop.

Parsing a large JSON body, validating it, rendering a chat template over thousands of messages,
tokenising the result and compiling a grammar can each take seconds on a hostile (or just big)
request. Done on the event loop, that work freezes `/health` and every running stream until it
ends, and SIGTERM with them. So:

- `PreparedBodyRoute` is the route class of every JSON API: it reads the body on the loop (I/O),
  then parses and validates it in a worker thread, and hands the endpoint the validated model.
  The endpoint's signature still documents the body in the OpenAPI schema.
- `read_json(request, parse)` does the same for the few routes that parse their own body.
- `off_loop(fn, ...)` runs the rest of the preparation (templating, tokenising, grammars) in the
  same workers. A result whose caller has gone (the client disconnected while its request was
  being prepared) is handed to `abandon`, so a stream nobody will read is cancelled at once.

The workers are few on purpose: preparation is CPU work, and a flood of big bodies should queue
behind each other, not take every core from the decode thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import sys
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pydantic_core
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel, TypeAdapter, ValidationError
from starlette.requests import Request
from starlette.responses import Response

from .errors import APIError
from .executors import LazyExecutor
from .limits import limits_of
from .precheck import PRECHECK_BYTES, precheck

__all__ = [
    "PREPARE_WORKERS",
    "PreparedBodyRoute",
    "off_loop",
    "parse_json_body",
    "precheck_big",
    "read_json",
]

T = TypeVar("T")

# Enough that one slow request does not hold up the others; few enough that a flood cannot
# take the cores from the decode thread.
PREPARE_WORKERS = 3

_workers = LazyExecutor(
    lambda: concurrent.futures.ThreadPoolExecutor(
        max_workers=PREPARE_WORKERS, thread_name_prefix="llamactl-prepare"
    )
)


async def off_loop(
    fn: Callable[..., T], *args: Any, abandon: Callable[[T], None] | None = None, **kwargs: Any
) -> T:
    """`fn(*args, **kwargs)` in a preparation worker. If the awaiting task is cancelled before
    the work ends, the work still runs to its end (a thread cannot be stopped) and its result
    goes to `abandon`, e.g. to cancel a generation that was submitted for a departed client."""
    future = _workers.get().submit(functools.partial(fn, *args, **kwargs))
    try:
        return await asyncio.wrap_future(future)
    except asyncio.CancelledError:
        if abandon is not None:
            future.add_done_callback(functools.partial(_abandon, abandon))
        raise


def _abandon(abandon: Callable[[Any], None], future: concurrent.futures.Future) -> None:
    if not future.cancelled() and future.exception() is None:
        abandon(future.result())


@functools.lru_cache(maxsize=64)
def _adapter(annotation: Any) -> TypeAdapter:
    return TypeAdapter(annotation)


def parse_json_body(annotation: Any, raw: bytes) -> Any:
    """Validate `raw` JSON against `annotation` (pydantic's parser: one pass, in Rust).

    Errors are raised as FastAPI's `RequestValidationError`, so they get the same 400 as any
    other validation error. A lone UTF-16 surrogate (`"\\ud800"`) is invalid JSON here, which
    keeps strings that cannot be encoded as UTF-8 out of the templates and the tokenizer."""
    try:
        return _adapter(annotation).validate_json(raw)
    except ValidationError as exc:
        raise RequestValidationError(
            [{**err, "loc": ("body", *err.get("loc", ()))} for err in exc.errors()]
        ) from None


async def precheck_big(request: Request, raw: bytes) -> None:
    """A body over `PRECHECK_BYTES` is held to the JSON-value and field limits in the helper
    process before this process parses it (server/precheck.py)."""
    if len(raw) <= PRECHECK_BYTES:
        return
    state = request.app.state.llamactl
    engine = state.scheduler  # None on an embeddings-only server: no vocabulary to bound by
    n_vocab = engine.model.n_vocab if engine is not None else sys.maxsize
    await precheck(raw, limits_of(state.settings), n_vocab)


async def read_json(request: Request, parse: Callable[[bytes], T]) -> T:
    """For a route that parses its own JSON body (one that also takes a form, or hands the
    engine raw JSON): the body read on the loop, held to the limits when big (`precheck_big`),
    then `parse(raw)` in a preparation worker, as `PreparedBodyRoute` does for the others."""
    raw = await request.body()
    await precheck_big(request, raw)
    return await off_loop(parse, raw)


class PreparedBodyRoute(APIRoute):
    """A route whose JSON body is parsed and validated in a preparation worker.

    The endpoint takes the body (one parameter annotated with a pydantic model, optional when
    it has a default) and the `Request`. Routes without a body are FastAPI's own. A route that
    also takes path or query parameters has its body checked and parsed to JSON values in a
    worker, and FastAPI then validates those (a small body model, on the loop) with the
    parameters, as it would have done after parsing the JSON on the loop itself."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        body_params = self.dependant.body_params
        if not body_params:  # GET, DELETE: nothing to parse
            return super().get_route_handler()
        if len(body_params) != 1 or self.dependant.request_param_name is None:
            raise TypeError(f"{self.path}: a prepared route takes one body and the request")
        dep = self.dependant
        if dep.path_params or dep.query_params or dep.header_params or dep.cookie_params:
            return _parsed_first(super().get_route_handler())
        body = body_params[0]
        annotation, required = body.field_info.annotation, body.field_info.is_required()
        default = None if required else body.field_info.get_default(call_default_factory=True)
        request_name = self.dependant.request_param_name
        endpoint = self.endpoint
        exclude_none = self.response_model_exclude_none

        async def handler(request: Request) -> Response:
            raw = await request.body()
            await precheck_big(request, raw)
            if not raw.strip() and not required:
                value = default
            else:
                value = await off_loop(parse_json_body, annotation, raw)
            result = await endpoint(**{body.name: value, request_name: request})
            if isinstance(result, Response):
                return result
            if isinstance(result, BaseModel):
                result = result.model_dump(mode="json", by_alias=True, exclude_none=exclude_none)
            return JSONResponse(jsonable_encoder(result))

        return handler


def _parsed_first(
    fastapi_handler: Callable[[Request], Coroutine[Any, Any, Response]],
) -> Callable[[Request], Coroutine[Any, Any, Response]]:
    """FastAPI's handler, given a request whose JSON is already parsed (off the loop, after
    the precheck): Starlette's `Request.json()` returns what `_json` holds."""

    async def handler(request: Request) -> Response:
        raw = await request.body()
        await precheck_big(request, raw)
        if raw.strip():
            setattr(request, "_json", await off_loop(_json_values, raw))  # noqa: B010
        return await fastapi_handler(request)

    return handler


def _json_values(raw: bytes) -> Any:
    """pydantic's parser, which (unlike `json.loads`) refuses lone UTF-16 surrogates."""
    try:
        return pydantic_core.from_json(raw)
    except ValueError as exc:
        raise APIError(400, f"Invalid JSON in the request body: {exc}") from None
