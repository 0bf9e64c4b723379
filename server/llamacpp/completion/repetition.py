"""llama-server's repetition fields on the native `/completion` body (`repeat_last_n` and
DRY), laid over the sampling the OpenAI fields already chose.

Their defaults are the server's (`--repeat-last-n`, `--dry-*`: llama-server's, DRY off).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from llamactl import SamplingParams

from ...common import INT32_MAX, check_float_range, check_int_range
from ...errors import bad_request
from .protocol import NativeCompletionRequest

__all__ = ["with_repetition_fields"]


def with_repetition_fields(
    sampling: SamplingParams, body: NativeCompletionRequest
) -> SamplingParams:
    """`sampling` with the body's repetition fields; 400 for the values llama-server refuses."""
    for name in ("repeat_last_n", "dry_allowed_length", "dry_penalty_last_n"):
        check_int_range(name, getattr(body, name), 0, INT32_MAX)
    check_float_range("dry_multiplier", body.dry_multiplier, 0.0, 1e6)
    changes: dict[str, Any] = {
        name: value
        for name in ("repeat_last_n", "dry_multiplier", "dry_allowed_length", "dry_penalty_last_n")
        if (value := getattr(body, name)) is not None
    }
    # llama-server: a base below 1 means the server's
    if body.dry_base is not None and body.dry_base >= 1.0:
        changes["dry_base"] = body.dry_base
    if body.dry_sequence_breakers is not None:
        if not body.dry_sequence_breakers:
            raise bad_request("Error: dry_sequence_breakers must be a non-empty array of strings")
        changes["dry_sequence_breakers"] = tuple(body.dry_sequence_breakers)
    return dataclasses.replace(sampling, **changes) if changes else sampling
