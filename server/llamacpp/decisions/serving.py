"""`/v1/systemone` and `/v1/decisions` over the loaded decision engine: reading the body off
the event loop, scoring, and the spec's statuses and answer shape.

Which model is a decision model is the loader's choice (`server/loader.py`); a server whose
model is not one answers these routes with the spec's 501 through `ServerState.require_decisions`.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pydantic_core
from fastapi import Request

from llamactl import DecisionEngine, DecisionNotSupportedError, DecisionResult, LlamactlError

from ...errors import APIError, from_engine_error
from ...prepare import off_loop, read_json
from ...services import not_supported
from ...state import ServerState


async def read_body(request: Request) -> Any:
    """The JSON body, parsed in a preparation worker (a big body must not stall the loop),
    after the JSON-value limit when it is big."""
    return await read_json(request, _parse_json)


def _parse_json(raw: bytes) -> Any:
    """pydantic's parser, which (unlike `json.loads`) refuses lone UTF-16 surrogates."""
    try:
        return pydantic_core.from_json(raw)
    except ValueError as exc:
        raise APIError(400, f"Invalid JSON in the request body: {exc}") from None


async def decide(engine: DecisionEngine, body: Any) -> DecisionResult:
    """Validate `body` and answer it; errors become the spec's statuses."""
    try:
        request = await off_loop(engine.parse, body)
        return await asyncio.wrap_future(engine.submit(request))
    except DecisionNotSupportedError as exc:
        raise not_supported(str(exc)) from None
    except LlamactlError as exc:
        raise from_engine_error(exc) from exc


def systemone_response(state: ServerState, result: DecisionResult) -> dict[str, Any]:
    """Key order `model`, `answers`, `usage`; answers in request order."""
    return {
        "model": state.model_id,
        "answers": {qid: a.as_dict() for qid, a in result.answers.items()},
        "usage": result.usage(),
    }
