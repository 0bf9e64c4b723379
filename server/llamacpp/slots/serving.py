"""Slot snapshots in llama-server's `/slots` shape."""

from __future__ import annotations

from typing import Any

from llamactl import Engine, SlotInfo

from ..generation_params import generation_params

__all__ = ["slot_json"]


def slot_json(engine: Engine, slot: SlotInfo) -> dict[str, Any]:
    """One slot: always its id, context and state; its current (or last) job when it has run
    one. The prompt and the text generated are rendered as the model's tokens read."""
    out: dict[str, Any] = {
        "id": slot.id,
        "n_ctx": slot.n_ctx,
        "speculative": slot.speculative,
        "is_processing": slot.busy,
    }
    job = slot.job
    if job is None:
        return out
    n_decoded = len(job.generated)
    remaining = -1 if job.max_tokens is None else max(job.max_tokens - n_decoded, 0)
    model = engine.model
    out |= {
        "n_prompt_tokens": len(job.prompt),
        "n_prompt_tokens_processed": job.n_prompt_processed,
        "n_prompt_tokens_cache": job.n_cached,
        "params": generation_params(job.sampling, job.max_tokens),
        "next_token": [
            {
                "has_next_token": not job.finished,
                "n_remain": remaining,
                "n_decoded": n_decoded,
            }
        ],
        "prompt": model.detokenize(list(job.prompt), special=True),
        "generated": model.detokenize(list(job.generated), special=True),
    }
    return out
