"""`GET /metrics`: Prometheus text (only with `--metrics`)."""

from __future__ import annotations

import time

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse

from llamactl import DecisionEngine, Engine

from ..services import not_supported
from ..state import ServerState
from .engine_of import loaded_engine

__all__ = ["router"]

router = APIRouter()


@router.get("/metrics", tags=["metrics"], response_class=PlainTextResponse)
def metrics(request: Request) -> PlainTextResponse:
    """Prometheus text format; only with --metrics."""
    state: ServerState = request.app.state.llamactl
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
    lines += _voice_lines(state)
    for route, count in sorted(state.metrics.http_requests.items()):
        lines.append(f'llamactl:http_requests_total{{route="{route}"}} {count}')
    for name, kind, help_text, value in llamacpp_rows(eng):
        lines += [
            f"# HELP llamacpp:{name} {help_text}",
            f"# TYPE llamacpp:{name} {kind}",
            f"llamacpp:{name} {value}",
        ]
    label = _label_value(state.model_id)
    for name, kind, help_text, value in gateway_rows(eng):
        lines += [
            f"# HELP vllm:{name} {help_text}",
            f"# TYPE vllm:{name} {kind}",
            f'vllm:{name}{{model_name="{label}"}} {value}',
        ]
    headers = {"Process-Start-Time-Unix": str(int(state.metrics.started))}
    return PlainTextResponse(
        "\n".join(lines) + "\n", media_type="text/plain; version=0.0.4", headers=headers
    )


def llamacpp_rows(eng: Engine | DecisionEngine) -> list[tuple[str, str, str, float]]:
    """llama-server's metric names, so its dashboards read llamactl too; the values are the
    same engine counters the llamactl:* names show."""
    st = eng.stats
    specs = eng.speculators if isinstance(eng, Engine) else []
    drafted = sum(s.stats.drafted for s in specs)
    accepted = sum(s.stats.accepted for s in specs)
    drafts = sum(s.stats.drafts for s in specs)
    prompt_rate = st.prompt_tokens_processed / st.prompt_seconds if st.prompt_seconds else 0.0
    predicted_rate = st.tokens_generated / st.predicted_seconds if st.predicted_seconds else 0.0
    per_decode = st.busy_slot_steps / max(st.decode_calls, 1)
    return [
        (
            "prompt_tokens_total",
            "counter",
            "Number of prompt tokens processed.",
            st.prompt_tokens_processed,
        ),
        (
            "prompt_tokens_cached_total",
            "counter",
            "Number of prompt tokens reused from the cache.",
            st.prompt_tokens_cached,
        ),
        ("prompt_seconds_total", "counter", "Prompt process time", st.prompt_seconds),
        (
            "tokens_predicted_total",
            "counter",
            "Number of generation tokens processed.",
            st.tokens_generated,
        ),
        ("tokens_predicted_seconds_total", "counter", "Predict process time", st.predicted_seconds),
        ("n_decode_total", "counter", "Total number of llama_decode() calls", st.decode_calls),
        (
            "n_tokens_max",
            "counter",
            "Largest observed sequence length (prompt + generation)",
            st.n_tokens_max,
        ),
        (
            "spec_decode_num_draft_tokens_total",
            "counter",
            "Speculative: Total draft tokens generated",
            drafted,
        ),
        (
            "spec_decode_num_accepted_tokens_total",
            "counter",
            "Speculative: Total draft tokens accepted by the target model",
            accepted,
        ),
        (
            "spec_decode_num_drafts_total",
            "counter",
            "Speculative: Total speculative decoding verification steps",
            drafts,
        ),
        ("prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s", prompt_rate),
        (
            "predicted_tokens_seconds",
            "gauge",
            "Average generation throughput in tokens/s",
            predicted_rate,
        ),
        ("requests_processing", "gauge", "Number of requests processing", eng.busy_slots),
        ("requests_deferred", "gauge", "Number of requests deferred", eng.queue_depth),
        (
            "n_busy_slots_per_decode",
            "gauge",
            "Average number of busy slots per llama_decode() call",
            per_decode,
        ),
    ]


def gateway_rows(eng: Engine | DecisionEngine) -> list[tuple[str, str, str, float]]:
    """The model-server protocol of the Gateway API Inference Extension, under vLLM's names
    (what its endpoint picker, llm-d and KServe read to route by load and by cache). The
    values are the same engine counters as the other names'."""
    st = eng.stats
    usage = eng.kv_usage if isinstance(eng, Engine) else 0.0
    lookups = st.prompt_tokens_processed + st.prompt_tokens_cached
    return [
        ("num_requests_waiting", "gauge", "Requests waiting for a slot", eng.queue_depth),
        ("num_requests_running", "gauge", "Requests generating in a slot", eng.busy_slots),
        ("kv_cache_usage_perc", "gauge", "KV-cache usage; 1 means 100 percent", usage),
        ("gpu_cache_usage_perc", "gauge", "KV-cache usage (the older name)", usage),
        (
            "prefix_cache_queries_total",
            "counter",
            "Prompt tokens looked up in the prefix cache",
            lookups,
        ),
        (
            "prefix_cache_hits_total",
            "counter",
            "Prompt tokens found in the prefix cache",
            st.prompt_tokens_cached,
        ),
    ]


def _label_value(text: str) -> str:
    """Prometheus label escaping: backslash, quote and newline."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _voice_lines(state: ServerState) -> list[str]:
    """Each voice stage's wait for the cores and its compute time (llamactl.engine.cores), as
    Prometheus summaries without quantiles, and the decode time given to speech."""
    cores = state.cores
    lines = [
        "# HELP llamactl:voice_llm_paused_seconds_total Decode time given to a voice turn's speech",
        "# TYPE llamactl:voice_llm_paused_seconds_total counter",
        f"llamactl:voice_llm_paused_seconds_total {cores.llm_paused_seconds}",
    ]
    stages = cores.stages()
    for name, what, value in (
        ("voice_stage_seconds", "Compute time of each voice stage", "seconds"),
        ("voice_stage_wait_seconds", "Wait for the cores before each voice stage", "wait"),
    ):
        lines += [f"# HELP llamactl:{name} {what}", f"# TYPE llamactl:{name} summary"]
        for stage, totals in sorted(stages.items()):
            total = totals.seconds if value == "seconds" else totals.wait_seconds
            lines += [
                f'llamactl:{name}_sum{{stage="{stage}"}} {total}',
                f'llamactl:{name}_count{{stage="{stage}"}} {totals.count}',
            ]
    return lines


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
