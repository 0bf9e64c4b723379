"""Health, model list and Prometheus metrics."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from llamactl import DecisionEngine, Engine

from .app_state import AppState
from .capabilities import architecture, served_capabilities
from .errors import APIError, error_response
from .services import not_supported
from .state import ServerState

router = APIRouter()


def app_state(request: Request) -> AppState:
    return request.app.state.llamactl


def server_state(request: Request) -> ServerState:
    """The loaded server's state (the gate answers 503 before a route runs while loading)."""
    return request.app.state.llamactl


def loaded_engine(state: ServerState) -> Engine | DecisionEngine:
    engine = state.scheduler
    if engine is None:  # only between the gate and a failed load's cleanup
        raise APIError(503, state.load_error or "Loading model", "unavailable_error")
    return engine


@router.get("/health", tags=["health"])
@router.get("/v1/health", include_in_schema=False)
def health(request: Request) -> JSONResponse:
    """200 once the model is loaded; 503 `unavailable_error` while it loads (or failed)."""
    state = app_state(request)
    if state.ready:
        return JSONResponse({"status": "ok"})
    message = state.load_error or "Loading model"
    return error_response(request.url.path, 503, message)


@router.get("/v1/models", tags=["models"])
@router.get("/models", include_in_schema=False)
def list_models(request: Request) -> dict:
    state = server_state(request)
    engine = loaded_engine(state)
    info = engine.model.info
    entry: dict[str, Any] = {
        "id": state.model_id,
        "object": "model",
        "created": int(state.metrics.started),
        "owned_by": "llamactl",
        "meta": {
            "architecture": info.architecture,
            "n_ctx_train": info.n_ctx_train,
            "n_ctx_slot": engine.n_ctx_slot,
            "n_params": info.n_params,
            "n_vocab": info.n_vocab,
            "size": info.size_bytes,
            "capabilities": list(info.capabilities),
        },
    }
    projector = projector_capabilities(state)
    entry["capabilities"] = served_capabilities(info.capabilities, projector)
    entry["architecture"] = architecture(info.capabilities, projector)
    return {"object": "list", "data": [entry]}


def projector_capabilities(state: ServerState) -> tuple[str, ...]:
    """ "see" / "hear" of a decision model's loaded mmproj (chat models use none)."""
    projector = state.decisions.dm.projector if state.decisions is not None else None
    if projector is None:
        return ()
    return tuple(c for c, on in (("see", projector.vision), ("hear", projector.audio)) if on)


@router.get("/metrics", tags=["metrics"], response_class=PlainTextResponse)
def metrics(request: Request) -> PlainTextResponse:
    """Prometheus text format; only with --metrics."""
    state = server_state(request)
    if not state.settings.metrics:
        raise not_supported(
            "This server does not support metrics endpoint. Start it with --metrics"
        )
    eng = loaded_engine(state)
    st = eng.stats
    uptime = max(time.time() - state.metrics.started, 1e-9)
    gen_rate = st.tokens_generated / st.decode_seconds if st.decode_seconds else 0.0
    rows = [
        ("requests_total", "counter", "Generation requests accepted", st.requests_total),
        ("tokens_predicted_total", "counter", "Tokens generated", st.tokens_generated),
        ("prompt_tokens_total", "counter", "Prompt tokens decoded", st.prompt_tokens_processed),
        (
            "prompt_tokens_cached_total",
            "counter",
            "Prompt tokens reused from the cache",
            st.prompt_tokens_cached,
        ),
        ("decode_calls_total", "counter", "llama_decode calls", st.decode_calls),
        (
            "predicted_tokens_seconds",
            "gauge",
            "Generated tokens per second of decode time",
            gen_rate,
        ),
        ("requests_processing", "gauge", "Busy slots", eng.busy_slots),
        ("requests_deferred", "gauge", "Requests waiting for a slot", eng.queue_depth),
        ("slots_total", "gauge", "Slots", eng.config.n_parallel),
        ("uptime_seconds", "gauge", "Seconds since the server started", uptime),
    ]
    rows += _cache_rows(eng)
    lines = []
    for name, kind, help_text, value in rows:
        lines += [
            f"# HELP llamactl:{name} {help_text}",
            f"# TYPE llamactl:{name} {kind}",
            f"llamactl:{name} {value}",
        ]
    lines += _speculator_lines(eng)
    for route, count in sorted(state.metrics.http_requests.items()):
        lines.append(f'llamactl:http_requests_total{{route="{route}"}} {count}')
    return PlainTextResponse("\n".join(lines) + "\n", media_type="text/plain; version=0.0.4")


def _cache_rows(eng: Engine | DecisionEngine) -> list[tuple[str, str, str, float]]:
    """The prompt cache's and checkpoints' counters (none when the cache is off)."""
    # A decision model's scoring engine keeps neither cache nor checkpoints
    rows: list[tuple[str, str, str, float]] = [
        ("checkpoints_total", "counter", "Context checkpoints made", eng.stats.checkpoints_made)
    ]
    cache = eng.cache if isinstance(eng, Engine) else None
    if cache is None:
        return rows
    st = cache.stats
    return rows + [
        ("prompt_cache_entries", "gauge", "Sequence states in the RAM cache", len(cache)),
        ("prompt_cache_bytes", "gauge", "Bytes held by the RAM prompt cache", cache.nbytes),
        ("prompt_cache_saves_total", "counter", "States saved to the cache", st.saves),
        ("prompt_cache_restores_total", "counter", "States restored from the cache", st.restores),
        ("prompt_cache_evictions_total", "counter", "States evicted for room", st.evictions),
    ]


def _speculator_lines(eng: Engine | DecisionEngine) -> list[str]:
    """Per-speculator counters, labelled by type (none without --spec-type)."""
    speculators = eng.speculators if isinstance(eng, Engine) else None  # none when scoring
    if not speculators:
        return []
    metrics = [
        ("spec_drafts_total", "Drafts verified", "drafts"),
        ("spec_drafts_accepted_total", "Drafts with at least one token kept", "accepted_drafts"),
        ("spec_tokens_drafted_total", "Tokens drafted", "drafted"),
        ("spec_tokens_accepted_total", "Drafted tokens kept", "accepted"),
    ]
    lines = []
    for name, help_text, attr in metrics:
        lines += [f"# HELP llamactl:{name} {help_text}", f"# TYPE llamactl:{name} counter"]
        for spec in speculators:
            lines.append(f'llamactl:{name}{{type="{spec.name}"}} {getattr(spec.stats, attr)}')
    return lines
