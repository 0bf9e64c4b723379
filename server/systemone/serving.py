"""Decision models behind the server: loading one in place of the chat engine, answering
`/v1/systemone` and `/v1/decisions`, and refusing text generation clearly.

A decision model gets a `DecisionEngine` instead of the chat engine (it answers in one forward
pass per question and generates nothing). `state.engine` becomes a stand-in that keeps
`/v1/models` and `/metrics` working and refuses `submit`, and `state.chat` refuses every chat
route, so a decision model never silently generates text (MiniCPM-OCR-Jev has no LM head).
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Any, NoReturn

import pydantic_core
from fastapi import Request

from llamactl import (
    DecisionConfig,
    DecisionEngine,
    DecisionResult,
    LlamactlError,
    NotSupportedError,
    decision_type_of,
    find_mmproj,
    load_decision_model,
    read_gguf_info,
)

from ..errors import APIError, from_engine_error
from ..prepare import off_loop
from ..state import ServerState

log = logging.getLogger("llamactl.server")

NOT_A_DECISION_MODEL = "This model is not a decision model"
MMPROJ_ENV = "LLAMACTL_MMPROJ"  # what the router passes a child for a preset's `mmproj`


def is_decision_model(path: Path) -> bool:
    """From the GGUF header alone: no model load."""
    try:
        return decision_type_of(read_gguf_info(path)) is not None
    except LlamactlError:
        return False  # not readable here: the chat loader reports it


def load_into(state: ServerState) -> None:
    """Load the decision model at `state.model_path` and install it on `state`."""
    s = state.settings
    env = os.environ.get(MMPROJ_ENV)
    mmproj = Path(env) if env else find_mmproj(state.model_path)
    from llamactl.converters.progress import terminal_progress

    dm = load_decision_model(
        state.model_path, mmproj=mmproj, n_threads=s.threads, progress=terminal_progress
    )
    for note in dm.notes:
        log.info("%s", note)
    config = DecisionConfig(
        n_parallel=s.parallel,
        n_ctx=s.n_ctx or None,
        n_batch=s.batch_size,
        n_threads=s.threads,
        flash_attn=s.flash_attn != "off",
        max_queue=s.max_queue,
    )
    try:
        engine = DecisionEngine(dm, config)
    except BaseException:
        dm.close()
        raise
    refusal = (
        f"'{state.model_id}' is a decision model ({dm.dtype.name}): it answers "
        "POST /v1/systemone and POST /v1/decisions and does not generate text"
    )
    state.decisions = engine
    state.engine = DecisionStandIn(engine, refusal)  # type: ignore[assignment]
    state.chat = RefusingChat(refusal)  # type: ignore[assignment]
    log.info(
        "decision model %s (%s), %d slots, at most %d options per question%s",
        state.model_id,
        dm.dtype.name,
        config.n_parallel,
        engine.max_options,
        f", mmproj {dm.projector.path.name}" if dm.projector else "",
    )


def refuse(message: str) -> NoReturn:
    raise NotSupportedError(message)


class RefusingChat:
    """`state.chat` for a decision model: every use is a 501 naming the endpoints to use."""

    def __init__(self, message: str) -> None:
        self._message = message

    def __getattr__(self, name: str) -> Any:
        refuse(self._message)


class DecisionStandIn:
    """`state.engine` for a decision model: the decision engine's counters and model for
    `/v1/models` and `/metrics`; `submit` (text generation) is refused."""

    def __init__(self, engine: DecisionEngine, message: str) -> None:
        self.decisions = engine
        self._message = message

    def submit(self, *_: Any, **__: Any) -> NoReturn:
        refuse(self._message)

    generate = submit

    def close(self) -> None:
        """Stop scoring (pending requests fail); `state.close` frees the model after."""
        self.decisions.close()
        self.decisions.dm.close(keep_model=True)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.decisions, name)


# ---------------------------------------------------------------------------- requests
def decision_engine(state: ServerState) -> DecisionEngine:
    """The loaded decision engine, or the spec's 501 (checked before the body is read)."""
    engine = getattr(state, "decisions", None)
    if engine is None:
        refuse(NOT_A_DECISION_MODEL)
    return engine


async def read_body(request: Request) -> Any:
    """The JSON body, parsed in a preparation worker (a big body must not stall the loop)."""
    return await off_loop(_parse_json, await request.body())


def _parse_json(raw: bytes) -> Any:
    """pydantic's parser, which (unlike `json.loads`) refuses lone UTF-16 surrogates."""
    try:
        return pydantic_core.from_json(raw)
    except ValueError as exc:
        raise APIError(400, f"Invalid JSON in the request body: {exc}") from None


async def score(engine: DecisionEngine, body: Any) -> DecisionResult:
    """Validate `body` and answer it; errors become the spec's statuses."""
    try:
        request = await off_loop(engine.parse, body)
        return await asyncio.wrap_future(engine.submit(request))
    except LlamactlError as exc:  # DecisionNotSupportedError: the spec's 501
        raise from_engine_error(exc) from exc


def systemone_response(state: ServerState, result: DecisionResult) -> dict[str, Any]:
    """Key order `model`, `answers`, `usage`; answers in request order."""
    return {
        "model": state.model_id,
        "answers": {qid: a.as_dict() for qid, a in result.answers.items()},
        "usage": result.usage(),
    }
