"""Creating a llama.cpp context: the one place both engines (chat and decisions) lay one out.

A context's layout decides more than memory: split KV streams and the KV element type decide
whether a sequence's logits depend on what it is batched with (docs/engine.md, Exactness).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import llama_cpp

from llamactl.core.errors import ModelLoadError
from llamactl.core.memory import available_memory

from .limits import DEFAULT_SLOT_CTX, KV_MEMORY_SHARE, physical_cores
from .model import Model

if TYPE_CHECKING:
    from .requests import EngineConfig

__all__ = [
    "DEFAULT_SLOT_CTX",
    "KV_TYPES",
    "SPLIT_KERNEL_KV",
    "ChatPlan",
    "ChatSizes",
    "ContextLayout",
    "default_slot_ctx",
    "kv_bytes_per_position",
    "open_context",
    "physical_cores",
    "plan_chat",
    "resolve_kv_type",
]

KV_TYPES = {"bf16": 30, "f16": 1, "q8_0": 8}  # ggml_type values


def default_slot_ctx(model: Model, n_parallel: int = 1, kv_type: str = "f16") -> int:
    """Positions per slot when none are asked for: the training context, as far as the KV of
    `n_parallel` such slots fits in KV_MEMORY_SHARE of the memory available now, and never
    less than min(training context, DEFAULT_SLOT_CTX). Agents send 15-30k-token prompts: a
    slot should hold what the model was trained to read."""
    train = model.info.n_ctx_train or DEFAULT_SLOT_CTX
    floor = min(train, DEFAULT_SLOT_CTX)
    per_position = kv_bytes_per_position(model, kv_type) * max(1, n_parallel)
    if per_position <= 0:
        return train
    fits = int(available_memory() * KV_MEMORY_SHARE / per_position) // 256 * 256
    return max(floor, min(train, fits))


def kv_bytes_per_position(model: Model, kv_type: str) -> float:
    """An upper bound on the KV bytes one position takes in one sequence: every layer's keys
    and values (sliding-window and recurrent layers take less, and are counted in full)."""
    h = model.handle
    n_head = max(1, llama_cpp.llama_model_n_head(h))
    n_embd = llama_cpp.llama_model_n_embd(h)
    arch = model.info.architecture

    def head_size(kind: str) -> int:
        value = model.info.metadata.get(f"{arch}.attention.{kind}_length")
        return int(value) if value and value.isdigit() else n_embd // n_head

    per_layer = llama_cpp.llama_model_n_head_kv(h) * (head_size("key") + head_size("value"))
    return llama_cpp.llama_model_n_layer(h) * per_layer * _KV_ELEMENT_BYTES.get(kv_type, 2.0)


_KV_ELEMENT_BYTES = {"f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32}


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


# KV types whose lone rows ggml computes by another kernel: the engine gives them companions
SPLIT_KERNEL_KV = ("f16",)


@dataclass(frozen=True)
class ChatPlan:
    """The chat engine's context, decided before llama.cpp opens it."""

    n_ctx: int
    threads: int
    can_trim: bool  # the memory drops a tail: not recurrent or hybrid
    kv_type: str
    # A one-slot engine's companions need a sequence of their own: one more sequence in the
    # slot's single KV stream (unified, so no second stream's memory), whose companion row
    # attends over one cell. As a row of the slot's own sequence it would attend over all of
    # them (measured past 1.7k cells, 2 threads: 46 ms a token with an own-sequence
    # companion, 33 with the spare one, 20 with none).
    spare_seq: int | None
    # Sliding-window attention's span (0: none). Its layers keep only the window's cells, so
    # a prefix can be cut back only while the window before the cut is still held.
    window: int = 0

    @property
    def split_kernels(self) -> bool:
        """Whether ggml computes a lone row and a row in company by other kernels."""
        return self.kv_type in SPLIT_KERNEL_KV

    @property
    def can_speculate(self) -> bool:
        """Whether drafts can be verified without changing an answer: the memory drops a
        rejected draft, and the KV is not a sliding window over f16 (measured on Gemma 3
        270M: greedy answers changed once drafting streams ran in company over f16, never
        over bf16 nor alone; the cause is not found, so speculation is off there)."""
        return self.can_trim and not (self.window and self.split_kernels)

    @property
    def companions(self) -> bool:
        """Over f16, ggml computes a lone row and a row in company by other kernels (see
        ubatch.py). Lone rows get a companion row, decoded and removed afterwards: one cell
        of every slot is held back for it, and the batch keeps room for one per slot. Even a
        one-slot engine takes them: a draft's rows are always in company, so without
        companions speculation would change its answers (measured: a one-slot engine without
        companions decodes 1.7x faster past 1.5k cells, and answers otherwise once
        speculation is on). Its companions go to the spare sequence."""
        return self.split_kernels and self.can_trim

    def layout(self, config: EngineConfig) -> ContextLayout:
        return ContextLayout(
            n_ctx=self.n_ctx,
            n_batch=config.n_batch,
            n_ubatch=config.n_ubatch,
            n_seq_max=config.n_parallel + (0 if self.spare_seq is None else 1),
            n_threads=self.threads,
            n_threads_batch=config.n_threads_batch or self.threads,
            kv_unified=config.kv_unified or self.spare_seq is not None,
            flash_attn=config.flash_attn,
            kv_type=self.kv_type,
        )


def plan_chat(model: Model, config: EngineConfig) -> ChatPlan:
    # A sliding window's cells are only ever overwritten once no later position can see them,
    # so the newest rows (a companion, a rejected draft) drop as in a dense cache.
    window = max(0, llama_cpp.llama_model_n_swa(model.handle))
    can_trim = not (model.info.is_recurrent or model.info.is_hybrid)
    kv_type = resolve_kv_type(config.kv_type, can_trim=can_trim)
    n_ctx = config.n_ctx or default_slot_ctx(model, config.n_parallel, kv_type) * config.n_parallel
    one_slot = config.n_parallel == 1 and kv_type in SPLIT_KERNEL_KV and can_trim
    threads = config.n_threads or physical_cores()
    return ChatPlan(n_ctx, threads, can_trim, kv_type, 1 if one_slot else None, window)


@dataclass(frozen=True)
class ChatSizes:
    """What the opened context holds, as the chat engine budgets it."""

    n_ctx: int
    n_batch: int
    n_ubatch: int
    n_ctx_seq: int  # each slot's KV cells
    n_ctx_slot: int  # what a slot's prompt and answer may fill
    row_budget: int  # rows a decode may take (room kept for a companion per slot)
    chunk_budget: int  # rows of a tiled prompt chunk, decoded alone

    @classmethod
    def of(cls, ctx: llama_cpp.llama_context_p, config: EngineConfig, plan: ChatPlan) -> ChatSizes:
        n_batch = llama_cpp.llama_n_batch(ctx)
        n_ubatch = llama_cpp.llama_n_ubatch(ctx)
        n_ctx_seq = llama_cpp.llama_n_ctx_seq(ctx)
        held = 1 if plan.companions else 0
        # llama.cpp pads each slot's cells to a multiple of 256, so a --ctx-size below that
        # is kept as a limit of its own
        asked = 0  # positions a slot was asked to hold (0: not asked, the model's default)
        if config.n_ctx:
            asked = config.n_ctx if config.kv_unified else max(1, config.n_ctx // config.n_parallel)
        n_ctx_slot = min(n_ctx_seq - held, asked or n_ctx_seq)
        row_budget = n_batch - (config.n_parallel if plan.companions else 0)
        # a tiled chunk is decoded alone: llama.cpp must not cut it into smaller micro-batches
        chunk_budget = min(row_budget, n_ubatch)
        n_ctx = llama_cpp.llama_n_ctx(ctx)
        return cls(n_ctx, n_batch, n_ubatch, n_ctx_seq, n_ctx_slot, row_budget, chunk_budget)
