"""What callers hand the engine: its layout (`EngineConfig`) and requests, and its counters."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from .types import SamplingParams

if TYPE_CHECKING:
    from .media_prompt import MediaPrompt

__all__ = ["EngineConfig", "EngineStats", "GenerationRequest", "ReasoningSpec"]


@dataclass(frozen=True)
class EngineConfig:
    """How the context is laid out; see docs/engine.md for what each choice trades."""

    n_parallel: int = 4
    n_ctx: int | None = None  # total KV positions; None: min(train ctx, 4096) per slot
    n_batch: int = 512
    n_ubatch: int = 512
    n_threads: int | None = None
    n_threads_batch: int | None = None
    kv_unified: bool = False
    flash_attn: bool = True
    # KV cache element type. "auto": f16 (llama.cpp's default and its fastest kernels), with
    # a companion row for every row llama.cpp would compute alone (see ubatch.py), so outputs
    # never depend on company; bf16 for models whose memory cannot be trimmed (recurrent,
    # hybrid, sliding-window), where a companion could not be taken back. bf16 and q8_0 take
    # one kernel for every shape; plain f16 is exact only with its companions, which the
    # engine adds whenever the KV streams are split.
    kv_type: Literal["auto", "bf16", "f16", "q8_0"] = "auto"
    max_queue: int = 0  # waiting requests beyond the slots; 0: unbounded
    cache_prompt: bool = True  # reuse a slot's KV prefix for a new prompt
    # RAM prompt cache in MiB: -1 no limit, 0 off; None: 8192, but off for decision models
    cache_ram_mib: int | None = None
    cache_idle_slots: bool = True  # save an idle slot's KV before a new request takes it
    # Directory the prompt cache is written to (on close and every `cache_persist_interval`
    # seconds; 0: only on close) and read from at start; None: RAM only
    cache_persist_dir: str | os.PathLike[str] | None = None
    cache_persist_interval: float = 60.0
    slot_prompt_similarity: float = 0.10  # prefer the idle slot sharing this much of a prompt
    ctx_checkpoints: int = 32  # checkpoints per slot, for models that cannot trim their memory
    checkpoint_min_step: int = 8192  # tokens between checkpoints (the last user message aside)
    spec_types: tuple[str, ...] = ()  # ngram-simple, ngram-mod, ngram-cache, draft-simple
    model_draft: str | os.PathLike[str] | None = None  # GGUF of the draft-simple model
    spec_draft_n_max: int = 3
    spec_draft_n_min: int = 0
    spec_draft_p_min: float = 0.0
    # ngram-mod (llama-server's names and defaults; drafts are capped at MAX_DRAFT tokens)
    spec_ngram_mod_n_match: int = 24
    spec_ngram_mod_n_min: int = 48
    spec_ngram_mod_n_max: int = 64
    spec_adaptive: bool = True  # cap drafts where their rows cost more than they should gain
    # LoRA adapters: `lora` at scale 1, then `lora_scaled` as (GGUF path, scale), ids in
    # that order; `lora_init_without_apply` loads them at scale 0 (`Engine.set_lora_scales`)
    lora: tuple[str, ...] = ()
    lora_scaled: tuple[tuple[str, float], ...] = ()
    lora_init_without_apply: bool = False
    # llama-server's --cache-reuse: shift cached chunks of at least this many tokens past the
    # common prefix into place instead of decoding them again; 0: off (inexact: shifted RoPE)
    cache_reuse: int = 0


@dataclass(frozen=True)
class ReasoningSpec:
    """Lets the engine end a choice's reasoning on its own: after `budget` tokens, or when
    asked (`Engine.end_reasoning`), it forces `end_tokens` next. Text markers tell it whether
    a choice is reasoning; `open` says the prompt already opened the block."""

    start: str
    end: str
    end_tokens: tuple[int, ...]
    open: bool = False
    budget: int | None = None  # reasoning tokens allowed; None: unlimited, 0: none at all


@dataclass
class GenerationRequest:
    prompt: list[int]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    n: int = 1
    logprobs: int | None = None  # None: none; 0: the chosen token's; k: also the top k
    render_special: bool = False  # show control tokens (e.g. gpt-oss channels) in the text
    ignore_eos: bool = False
    cache_prompt: bool = True
    # the slot to run in (llama-server's `id_slot`): the request waits for it; None: the
    # engine picks the idle slot sharing most of the prompt
    slot: int | None = None
    reasoning: ReasoningSpec | None = None
    # send `PromptProgress` events while the prompt decodes (llama-server's return_progress)
    report_progress: bool = False
    # where user messages start in `prompt` (from the chat template's delimiters): the
    # engine checkpoints there on models that cannot trim their memory
    user_starts: tuple[int, ...] = ()
    # images or audio in the prompt: `prompt` is `media.tokens`, with a placeholder id for
    # each position a media chunk fills (see media_prompt.py)
    media: MediaPrompt | None = None
    # llama-server's per-request `n_cache_reuse`; None: the engine's `cache_reuse`
    n_cache_reuse: int | None = None
    # the first this-many tokens go before every other request's (a voice answer's first
    # clause, which someone is waiting to hear): other sequences sit out those steps
    urgent_tokens: int = 0


@dataclass
class EngineStats:
    """Counters for /metrics and benchmarks (written by the decode thread only)."""

    requests_total: int = 0
    tokens_generated: int = 0
    prompt_tokens_processed: int = 0
    prompt_tokens_cached: int = 0
    decode_calls: int = 0
    decode_seconds: float = 0.0
    busy_slot_steps: int = 0  # busy slots summed over decode calls
    prompt_seconds: float = 0.0  # finished requests' prompt time, summed (llama-server's)
    predicted_seconds: float = 0.0  # finished requests' generation time, summed
    n_tokens_max: int = 0  # the longest sequence (prompt + generated) finished so far
    checkpoints_made: int = 0
    cache_reuse_shifted: int = 0  # prompt tokens moved into place by --cache-reuse
