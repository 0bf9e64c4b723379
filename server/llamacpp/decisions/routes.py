"""`POST /v1/systemone` (TypeSafe System One, as llama-server) and `POST /v1/decisions`
(the same engine in OpenAI's style)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from ...common import check_model, new_id, now, server_state
from ...errors import APIError, bad_request
from . import serving
from .protocol import DecisionsRequest, DecisionsResponse, SystemOneRequest, SystemOneResponse
from .protocol import body_doc as _body

router = APIRouter(tags=["decisions"])

_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"description": "An invalid request; the message names the question and field"},
    501: {"description": "Not a decision model, or media the model cannot take"},
}


@router.post(
    "/v1/systemone",
    response_model=SystemOneResponse,
    responses=_ERRORS,
    openapi_extra=_body(SystemOneRequest),
    summary="Answer typed questions about a state with a decision model",
)
@router.post("/systemone", include_in_schema=False)
async def systemone(request: Request) -> JSONResponse:
    state = server_state(request)
    engine = state.require_decisions()
    result = await serving.decide(engine, await serving.read_body(request))
    return JSONResponse(serving.systemone_response(state, result))


@router.post(
    "/v1/decisions",
    response_model=DecisionsResponse,
    responses=_ERRORS,
    openapi_extra=_body(DecisionsRequest),
    summary="Score questions with a decision model (OpenAI-style envelope)",
)
@router.post("/decisions", include_in_schema=False)
async def decisions(request: Request) -> JSONResponse:
    state = server_state(request)
    engine = state.require_decisions()
    body = await serving.read_body(request)
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise bad_request("Field 'model': must be a string")
    check_model(state, model)
    result = await serving.decide(engine, as_systemone(body))
    usage = result.usage()
    return JSONResponse(
        {
            "id": new_id("decision-"),
            "object": "decision",
            "created": now(),
            "model": model or state.model_id,
            "answers": [
                {"index": i, "id": qid, **answer.as_dict()}
                for i, (qid, answer) in enumerate(result.answers.items())
            ],
            "usage": {
                **usage,
                "total_tokens": usage["input_tokens"],
                "input_tokens_details": {"cached_tokens": result.cached_tokens},
            },
        }
    )


def as_systemone(body: dict[str, Any]) -> dict[str, Any]:
    """`input` is the state; `questions` may be an array of questions with ids."""
    out = {k: v for k, v in body.items() if k not in ("input", "model")}
    if "input" in body:
        out["state"] = body["input"]
    questions = body.get("questions")
    if isinstance(questions, list):
        keyed: dict[str, Any] = {}
        for i, q in enumerate(questions):
            qid = q.get("id") if isinstance(q, dict) else None
            if not isinstance(qid, str) or not qid or qid in keyed:
                raise APIError(400, f'questions[{i}]: "id" must be a unique, non-empty string')
            keyed[qid] = {k: v for k, v in q.items() if k != "id"}
        out["questions"] = keyed
    return out
