"""Embeddings: a context of its own (embeddings on, the chosen pooling) beside the chat engine.

Each input is decoded alone in one batch, so a vector never depends on what else was asked
at the same time (the exactness the chat engine keeps); inputs of all requests take turns on
one worker thread, which keeps the two compute threads for one decode at a time. An input
must fit one physical batch (`n_ubatch`), as llama-server requires: a non-causal model sees
the whole input at once.

Rank scores (`submit_scores`, pooling `rank`) are batched: one request's inputs share a
decode, one sequence each, as many as fit `n_ubatch` and `n_seq_max`; requests still take
turns, so a request is packed the same way whatever else is queued, and scores the same.
Encoder models (BERT and its kind) have no KV memory: each decode is then an encode.

A request's future stays cancellable while its inputs are worked through: `cancel()` (a client
that hung up) stops it before its next input or decode, so the worker moves on to the next
request instead of finishing work nobody will read.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, InvalidStateError, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal, TypeVar

import numpy as np

from llamactl.core.errors import InvalidRequestError, NotSupportedError

from ._backend import llama_cpp
from .batch import Batch
from .context import ContextLayout, open_context
from .model import Model

__all__ = ["POOLING_TYPES", "Embedder", "EmbedderConfig", "Pooling", "normalize"]

T = TypeVar("T")
Item = TypeVar("Item")

Pooling = Literal["none", "mean", "cls", "last", "rank"]
POOLING_TYPES: dict[str, int] = {
    "none": llama_cpp.LLAMA_POOLING_TYPE_NONE,
    "mean": llama_cpp.LLAMA_POOLING_TYPE_MEAN,
    "cls": llama_cpp.LLAMA_POOLING_TYPE_CLS,
    "last": llama_cpp.LLAMA_POOLING_TYPE_LAST,
    "rank": llama_cpp.LLAMA_POOLING_TYPE_RANK,
}


@dataclass(frozen=True)
class EmbedderConfig:
    n_ctx: int = 4096
    n_ubatch: int = 512
    n_threads: int = 2
    n_seq_max: int = 1  # inputs per decode for rank scores (embeddings: one at a time)
    pooling: Pooling | None = None  # None: the model's own (its GGUF's pooling_type)
    # Off by default: flash attention's f16 path moves a normalized vector's components by up
    # to 1e-2 on SmolLM2 (measured against llama.cpp without it, which agrees to 1e-8)
    flash_attn: bool = False


def normalize(vector: np.ndarray, kind: int) -> np.ndarray:
    """llama.cpp's embd_normalize: -1 none, 0 max-abs scaled to int16, 1 taxicab,
    2 euclidean (the default), p > 2 the p-norm."""
    v = vector.astype(np.float64)
    if kind < 0:
        return vector
    if kind == 0:
        norm = np.max(np.abs(v)) / 32760.0
    elif kind == 2:
        norm = float(np.sqrt(np.sum(v * v)))
    else:
        norm = float(np.sum(np.abs(v) ** kind) ** (1.0 / kind))
    return (v / norm).astype(np.float32) if norm > 0 else np.zeros_like(vector)


class Embedder:
    """Embeddings of token lists; `submit` is safe from any thread."""

    def __init__(self, model: Model, config: EmbedderConfig) -> None:
        self.model = model
        self.config = config
        pooling = POOLING_TYPES[config.pooling] if config.pooling else None
        n_ubatch = min(config.n_ubatch, config.n_ctx)
        self._ctx = open_context(
            model,
            ContextLayout(
                n_ctx=config.n_ctx,
                n_batch=n_ubatch,
                n_ubatch=n_ubatch,
                n_seq_max=max(1, config.n_seq_max),
                n_threads=config.n_threads,
                n_threads_batch=config.n_threads,
                kv_unified=True,  # the sequences of one decode share the cells
                flash_attn=config.flash_attn,
                embeddings=True,
                pooling_type=pooling,
            ),
        )
        self._mem = llama_cpp.llama_get_memory(self._ctx)  # None: an encoder, no KV cache
        self.n_ubatch = llama_cpp.llama_n_ubatch(self._ctx)
        self.n_seq_max = max(1, config.n_seq_max)
        self.pooling_type = llama_cpp.llama_pooling_type(self._ctx)
        self.n_embd = llama_cpp.llama_model_n_embd(model.handle)
        self._batch = Batch(self.n_ubatch)
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="llamactl-embed")
        self._lock = threading.Lock()
        self._closed = False
        self.decodes = 0  # decodes (or encodes) run so far: how much work was really done

    @property
    def pooled(self) -> bool:
        return self.pooling_type != llama_cpp.LLAMA_POOLING_TYPE_NONE

    @property
    def ranks(self) -> bool:
        """Pooling `rank`: each input's output is its relevance score(s)."""
        return self.pooling_type == llama_cpp.LLAMA_POOLING_TYPE_RANK

    def check(self, tokens: Sequence[int], field: str) -> None:
        """The 400 an input that cannot be embedded gets, before any work is queued."""
        if not tokens:
            raise InvalidRequestError(f"Field '{field}': input content cannot be empty")
        if len(tokens) > self.n_ubatch:
            raise InvalidRequestError(
                f"Field '{field}': input is too large to process ({len(tokens)} tokens); "
                f"the physical batch holds {self.n_ubatch}: raise --ubatch-size"
            )

    def submit(
        self, inputs: Sequence[Sequence[int]], fields: Sequence[str] | None = None
    ) -> Future[list[np.ndarray]]:
        """Each input's embedding: one vector when pooled (a rank model's scores), else one
        vector per token (a 2-D array). Unnormalized; see `normalize`. `fields` name the
        inputs in errors (default `input.i`)."""
        names = fields or [f"input.{i}" for i in range(len(inputs))]
        for tokens, name in zip(inputs, names, strict=True):
            self.check(tokens, name)
        return self._start(
            lambda cancelled: [self._embed(list(t)) for t in _until(cancelled, inputs)]
        )

    def submit_scores(
        self, inputs: Sequence[Sequence[int]], fields: Sequence[str] | None = None
    ) -> Future[list[float]]:
        """Each input's relevance score (the rank head's first output), inputs packed into as
        few decodes as fit. NotSupportedError when the pooling is not `rank`."""
        if not self.ranks:
            raise NotSupportedError("the embedding context does not use rank pooling")
        names = fields or [f"input.{i}" for i in range(len(inputs))]
        for tokens, name in zip(inputs, names, strict=True):
            self.check(tokens, name)
        groups = self._packed([len(t) for t in inputs])
        return self._start(
            lambda cancelled: [
                s
                for g in _until(cancelled, groups)
                for s in self._scores([list(inputs[i]) for i in g])
            ]
        )

    def _start(self, work: Callable[[Callable[[], bool]], T]) -> Future[T]:
        """`work(cancelled)` on the worker. The future is never marked running, so `cancel()`
        succeeds until the result is set; `work` checks `cancelled` between inputs and stops."""
        future: Future[T] = Future()

        def run() -> None:
            if future.cancelled():
                return  # cancelled while queued: nothing to do
            try:
                result = work(future.cancelled)
            except _Cancelled:
                return
            except Exception as exc:
                with contextlib.suppress(InvalidStateError):  # cancelled meanwhile
                    future.set_exception(exc)
            else:
                with contextlib.suppress(InvalidStateError):
                    future.set_result(result)

        self._worker.submit(run)
        return future

    def _packed(self, lengths: list[int]) -> list[list[int]]:
        """Consecutive inputs grouped so that each group fits one decode."""
        groups: list[list[int]] = []
        used = 0
        for i, n in enumerate(lengths):
            if not groups or used + n > self.n_ubatch or len(groups[-1]) >= self.n_seq_max:
                groups.append([])
                used = 0
            groups[-1].append(i)
            used += n
        return groups

    def _scores(self, group: list[list[int]]) -> list[float]:
        with self._lock:
            self._run(group)
            return [
                float(np.ctypeslib.as_array(self._pooled(seq), shape=(1,))[0])
                for seq in range(len(group))
            ]

    def _run(self, sequences: list[list[int]]) -> None:
        """One decode of `sequences` (sequence i: seq id i), the memory cleared first."""
        if self._closed:
            raise InvalidRequestError("the embedding model is closed")
        if self._mem is not None:
            llama_cpp.llama_memory_clear(self._mem, True)
        self._batch.clear()
        for seq, tokens in enumerate(sequences):
            for pos, token in enumerate(tokens):
                self._batch.add(token, pos, seq, True)
        if self._mem is None:
            rc = llama_cpp.llama_encode(self._ctx, self._batch.raw)
        else:
            rc = llama_cpp.llama_decode(self._ctx, self._batch.raw)
        self.decodes += 1
        if rc != 0:
            raise InvalidRequestError(f"llama.cpp could not embed the input (code {rc})")

    def _pooled(self, seq: int) -> ctypes._Pointer[ctypes.c_float]:
        ptr = llama_cpp.llama_get_embeddings_seq(self._ctx, seq)
        if not ptr:
            raise InvalidRequestError("llama.cpp returned no pooled output for the input")
        return ptr

    def _embed(self, tokens: list[int]) -> np.ndarray:
        with self._lock:
            self._run([tokens])
            if self.pooled:
                ptr = self._pooled(0)
                n = self._n_out()
                return np.ctypeslib.as_array(ptr, shape=(n,)).copy()
            rows = [
                np.ctypeslib.as_array(
                    llama_cpp.llama_get_embeddings_ith(self._ctx, i), shape=(self.n_embd,)
                ).copy()
                for i in range(len(tokens))
            ]
            return np.stack(rows)

    def _n_out(self) -> int:
        if self.pooling_type == llama_cpp.LLAMA_POOLING_TYPE_RANK:
            return max(1, llama_cpp.llama_model_n_cls_out(self.model.handle))
        return self.n_embd

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._batch.free()
            llama_cpp.llama_free(self._ctx)
        self._worker.shutdown(wait=False)


class _Cancelled(Exception):
    """The request's future was cancelled: its remaining inputs are dropped."""


def _until(cancelled: Callable[[], bool], items: Iterable[Item]) -> Iterator[Item]:
    """`items`, ending early (with `_Cancelled`) once `cancelled()` says so."""
    for item in items:
        if cancelled():
            raise _Cancelled
        yield item
