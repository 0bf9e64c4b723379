"""A generation's parameters as llama-server reports them (`/slots`, `/props`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from llamactl import SamplingParams

__all__ = ["RANDOM_SEED", "generation_params"]

RANDOM_SEED = 0xFFFFFFFF  # llama.cpp's LLAMA_DEFAULT_SEED: "a new seed each time"


def generation_params(
    sampling: SamplingParams, max_tokens: int | None, banned: Sequence[int] = ()
) -> dict[str, Any]:
    """The fields of llama-server's `params` object that llamactl's sampler has; `-1` for no
    token limit, as llama-server writes it. `banned`: the end-of-generation tokens `ignore_eos`
    bans, listed with the request's own biases (a ban's -inf is written null, as
    llama-server's JSON has no infinity)."""
    n_predict = -1 if max_tokens is None else max_tokens
    bias = {**sampling.logit_bias, **{t: float("-inf") for t in banned}}
    return {
        "seed": RANDOM_SEED if sampling.seed is None else sampling.seed,
        "temperature": sampling.temperature,
        "top_k": sampling.top_k,
        "top_p": sampling.top_p,
        "min_p": sampling.min_p,
        "repeat_last_n": sampling.repeat_last_n,
        "repeat_penalty": sampling.repeat_penalty,
        "presence_penalty": sampling.presence_penalty,
        "frequency_penalty": sampling.frequency_penalty,
        "dry_multiplier": sampling.dry_multiplier,
        "dry_base": sampling.dry_base,
        "dry_allowed_length": sampling.dry_allowed_length,
        "dry_penalty_last_n": sampling.dry_penalty_last_n,
        "dry_sequence_breakers": list(sampling.dry_sequence_breakers),
        "max_tokens": n_predict,
        "n_predict": n_predict,
        "n_probs": sampling.n_probs,
        "grammar": sampling.grammar or "",
        "logit_bias": [
            {"token": t, "bias": b if math.isfinite(b) else None} for t, b in bias.items()
        ],
    }
