"""Creating a llama.cpp context: the one place both engines (chat and decisions) lay one out.

A context's layout decides more than memory: split KV streams and the KV element type decide
whether a sequence's logits depend on what it is batched with (docs/engine.md, Exactness).
"""

from __future__ import annotations

from dataclasses import dataclass

import llama_cpp

from llamactl.core.errors import ModelLoadError

from .limits import DEFAULT_SLOT_CTX, physical_cores
from .model import Model

__all__ = [
    "DEFAULT_SLOT_CTX",
    "KV_TYPES",
    "ContextLayout",
    "default_slot_ctx",
    "open_context",
    "physical_cores",
    "resolve_kv_type",
]

KV_TYPES = {"bf16": 30, "f16": 1, "q8_0": 8}  # ggml_type values


def default_slot_ctx(model: Model) -> int:
    """Positions per slot when none are asked for: the training context, at most 4096
    (llama-server's per-slot size with `-c 0 -np N` on long-context models is far larger
    than a CPU wants to reserve)."""
    return min(model.info.n_ctx_train or DEFAULT_SLOT_CTX, DEFAULT_SLOT_CTX)


def resolve_kv_type(kv_type: str, *, can_trim: bool) -> str:
    """The KV element type "auto" stands for: f16 where lone rows can get companions
    (see ubatch.py), bf16 where the memory cannot take a companion back."""
    if kv_type != "auto":
        return kv_type
    return "f16" if can_trim else "bf16"


@dataclass(frozen=True)
class ContextLayout:
    n_ctx: int
    n_batch: int
    n_ubatch: int
    n_seq_max: int
    n_threads: int
    n_threads_batch: int
    kv_unified: bool = False
    flash_attn: bool = True
    kv_type: str | None = None  # a KV_TYPES key; None: llama.cpp's default
    embeddings: bool = False
    pooling_type: int | None = None  # a LLAMA_POOLING_TYPE_*; None: llama.cpp's default


def open_context(model: Model, layout: ContextLayout) -> llama_cpp.llama_context_p:
    """A new context for `model`, or ModelLoadError saying what llama.cpp refused."""
    params = llama_cpp.llama_context_default_params()
    params.n_ctx = layout.n_ctx
    params.n_batch = layout.n_batch
    params.n_ubatch = min(layout.n_ubatch, layout.n_batch)
    params.n_seq_max = layout.n_seq_max
    params.n_threads = layout.n_threads
    params.n_threads_batch = layout.n_threads_batch
    params.kv_unified = layout.kv_unified
    params.flash_attn_type = (
        llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
        if layout.flash_attn
        else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
    )
    params.no_perf = True
    if layout.kv_type is not None:
        params.type_k = params.type_v = KV_TYPES[layout.kv_type]
    params.embeddings = layout.embeddings
    if layout.pooling_type is not None:
        params.pooling_type = layout.pooling_type
    ctx = llama_cpp.llama_init_from_model(model.handle, params)
    if not ctx:
        raise ModelLoadError(
            f"llama.cpp could not create a context of {layout.n_ctx} tokens for {model.path.name}"
        )
    return ctx
