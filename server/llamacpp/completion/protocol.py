"""The native `/completion` body, as llama-server b11434 reads it (its README, "POST
/completion"). The sampling fields are the OpenAI endpoints' (`SamplingFields`)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, StrictInt

from ...openai.chat.protocol import SamplingFields

__all__ = ["NativeCompletionRequest", "NativePrompt"]

# A string; token ids, or texts and ids mixed (one prompt); or a list of such prompts
NativePrompt = str | list[StrictInt | str] | list[str | list[StrictInt | str]]


class NativeCompletionRequest(SamplingFields):
    """`POST /completion`. Unknown fields are ignored, as llama-server does."""

    prompt: NativePrompt = Field(
        description="A string, token ids, or texts and ids mixed (one prompt), or a list of "
        "strings / token lists (one result each, answered as a list). Strings get the model's "
        "BOS and may hold special tokens written out"
    )
    n_predict: int | None = Field(
        None, description="Tokens to generate at most; -1: no limit (the server's -n otherwise)"
    )
    n_probs: int = Field(
        0, description="0..20: with each generated token, this many likeliest alternatives"
    )
    return_tokens: bool = Field(False, description="Return the generated token ids in `tokens`")
    json_schema: dict[str, Any] | None = Field(
        None, description="Constrain the output to this JSON Schema"
    )
    n_cache_reuse: int | None = Field(
        None,
        ge=0,
        description="Shift cached chunks of at least this many tokens into place (inexact);"
        " 0: off; absent: the server's --cache-reuse",
    )
    repeat_last_n: int | None = Field(
        None, description="Tokens `repeat_penalty` looks back over; 0: off (the server's)"
    )
    dry_multiplier: float | None = Field(
        None, description="DRY penalty on tokens extending a repeated sequence; 0: off"
    )
    dry_base: float | None = Field(
        None, description="DRY: the penalty grows as base^(length - allowed); below 1: server's"
    )
    dry_allowed_length: int | None = Field(
        None, description="DRY: repeated sequences up to this many tokens go unpenalised"
    )
    dry_penalty_last_n: int | None = Field(
        None, description="DRY: tokens scanned for repetitions; 0: off"
    )
    dry_sequence_breakers: list[str] | None = Field(
        None,
        description='DRY: strings a repeated sequence may not cross (default ["\\n", ":",'
        ' "\\"", "*"]); a non-empty list',
    )
    id_slot: int = Field(
        -1,
        description="The slot to run in (waiting for it while it is busy; an id past the last"
        " slot wraps around, as llama-server); -1: the idle slot sharing most of the prompt",
    )
