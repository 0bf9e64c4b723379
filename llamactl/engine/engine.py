"""The batched engine: one llama.cpp context, `n_parallel` slots, one decode thread.

Each step admits waiting requests into free slots, packs one token per generating slot and
prompt chunks (bounded by `n_batch`) into a single batch, decodes once, then samples every
slot from its own logits row. A slot never reads another slot's logits, and with split KV
streams (`kv_unified = False`) each sequence's logits are bit-identical to a solo run, so
greedy output does not depend on what else is being served.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Literal

import llama_cpp

from llamactl.core.errors import (
    ContextLengthError,
    EngineClosedError,
    InvalidRequestError,
    LlamactlError,
    ModelLoadError,
    QueueFullError,
)

from .batch import Batch
from .detokenize import IncrementalDetokenizer
from .model import Model
from .prompt_cache import CacheEntry, Checkpoint, PromptCache, common_prefix, load_seq, save_seq
from .sampling import SamplerChain, check_grammar, token_logprobs
from .speculative import (
    DraftModel,
    NgramCache,
    NgramSimple,
    SeqState,
    Speculator,
    parse_spec_types,
)
from .stops import StopMatcher
from .stream import GenerationStream
from .types import Done, FinishReason, SamplingParams, TextDelta, Timings, Usage

log = logging.getLogger("llamactl.engine")

DEFAULT_SLOT_CTX = 4096
# Rows of one sequence in a ubatch from which ggml's CPU flash attention switches to another
# kernel (measured: 63 rows give the logits of 63 single-row decodes, 64 do not).
EXACT_PIECE = 64
KV_TYPES = {"bf16": 30, "f16": 1, "q8_0": 8}  # ggml_type values


def physical_cores() -> int:
    """Compute threads to use: llama.cpp collapses when it oversubscribes cores."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


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
    # KV cache element type. bf16 (not llama.cpp's f16 default): ggml's CPU flash attention
    # computes a lone single-token decode over an f16 cache of 512+ cells by another kernel
    # (split over the keys) than several rows or several slots, so with f16 a sequence's
    # logits past ~256 tokens depend on what it is batched with (and on speculation).
    # With bf16 (or q8_0) every row takes the same kernel: outputs never depend on company.
    kv_type: Literal["bf16", "f16", "q8_0"] = "bf16"
    max_queue: int = 0  # waiting requests beyond the slots; 0: unbounded
    cache_prompt: bool = True  # reuse a slot's KV prefix for a new prompt
    # RAM prompt cache in MiB: -1 no limit, 0 off; None: 8192, but off for decision models
    cache_ram_mib: int | None = None
    cache_idle_slots: bool = True  # save an idle slot's KV before a new request takes it
    slot_prompt_similarity: float = 0.10  # prefer the idle slot sharing this much of a prompt
    ctx_checkpoints: int = 32  # checkpoints per slot, for models that cannot trim their memory
    checkpoint_min_step: int = 8192  # tokens between checkpoints (the last user message aside)
    spec_types: tuple[str, ...] = ()  # speculators: ngram-simple, ngram-cache, draft-simple
    model_draft: str | os.PathLike[str] | None = None  # GGUF of the draft-simple model
    spec_draft_n_max: int = 3
    spec_draft_n_min: int = 0
    spec_draft_p_min: float = 0.0
    spec_adaptive: bool = True  # cap drafts where their rows cost more than they should gain


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
    reasoning: ReasoningSpec | None = None
    # where user messages start in `prompt` (from the chat template's delimiters): the
    # engine checkpoints there on models that cannot trim their memory
    user_starts: tuple[int, ...] = ()


SlotState = Literal["idle", "waiting_parent", "prompt", "generating"]


class _Slot:
    """One sequence of the context and the generation running in it."""

    def __init__(self, seq_id: int) -> None:
        self.seq_id = seq_id
        self.state: SlotState = "idle"
        self.kv_tokens: list[int] = []  # exactly what the KV cache holds for this sequence
        self.checkpoints: list[Checkpoint] = []  # partial states, oldest first
        self.saveable = False  # the KV is a finished completion's, not yet offered to the cache
        self.last_used = 0.0
        self._reset_job()

    def _reset_job(self) -> None:
        self.stream: GenerationStream | None = None
        self.request: GenerationRequest | None = None
        self.index = 0
        self.children: list[_Slot] = []
        self.prompt_pos = 0  # next prompt token to decode
        self.checkpoint_at: list[int] = []  # prompt positions to checkpoint at, ascending
        self.pending: int | None = None  # sampled, not yet decoded
        self.sampler: SamplerChain | None = None
        # Without the grammar: used while the model reasons, so a JSON grammar constrains only
        # the answer (None when the request has no grammar or no reasoning markers).
        self.free_sampler: SamplerChain | None = None
        self.detok: IncrementalDetokenizer | None = None
        self.stops: StopMatcher | None = None
        self.forced: deque[int] = deque()
        self.generated: list[int] = []
        self.cached = 0
        self.t_start = self.t_prompt_done = 0.0
        self.in_reasoning = False
        self.reasoning_tokens = 0
        self.marker_tail = ""  # recent text, to spot reasoning markers split over tokens
        self.spec = SeqState()
        self.draft_n = 0
        self.draft_accepted = 0

    @property
    def busy(self) -> bool:
        return self.state != "idle"

    def free_samplers(self) -> None:
        for chain in (self.sampler, self.free_sampler):
            if chain is not None:
                chain.free()

    def active_sampler(self) -> SamplerChain:
        """The grammar-free chain while reasoning (or draining forced tokens), else the main one."""
        if self.free_sampler is not None and (self.in_reasoning or self.forced):
            return self.free_sampler
        return self.sampler


class Engine:
    """Thread-safe front door to one model's batched context."""

    def __init__(self, model: Model, config: EngineConfig | None = None) -> None:
        self.model = model
        self.config = config = config or EngineConfig()
        if config.n_parallel < 1:
            raise InvalidRequestError("n_parallel must be at least 1")
        n_ctx = config.n_ctx or min(
            model.info.n_ctx_train or DEFAULT_SLOT_CTX, DEFAULT_SLOT_CTX
        ) * (config.n_parallel)
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = config.n_batch
        params.n_ubatch = min(config.n_ubatch, config.n_batch)
        params.n_seq_max = config.n_parallel
        threads = config.n_threads or physical_cores()
        params.n_threads = threads
        params.n_threads_batch = config.n_threads_batch or threads
        params.kv_unified = config.kv_unified
        params.flash_attn_type = (
            llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
            if config.flash_attn
            else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        )
        params.no_perf = True
        params.type_k = params.type_v = KV_TYPES[config.kv_type]
        ctx = llama_cpp.llama_init_from_model(model.handle, params)
        if not ctx:
            raise ModelLoadError(
                f"llama.cpp could not create a context of {n_ctx} tokens for {model.path.name}"
            )
        self._ctx = ctx
        self._mem = llama_cpp.llama_get_memory(ctx)
        self.n_ctx = llama_cpp.llama_n_ctx(ctx)
        self.n_ctx_slot = llama_cpp.llama_n_ctx_seq(ctx)
        self.n_batch = llama_cpp.llama_n_batch(ctx)
        swa = llama_cpp.llama_model_n_swa(model.handle) > 0
        self._can_trim = not (model.info.is_recurrent or model.info.is_hybrid or swa)
        self._checkpoints = not self._can_trim and config.ctx_checkpoints > 0
        cache_mib = config.cache_ram_mib
        if cache_mib is None:  # decision states seldom repeat: off unless asked for
            cache_mib = 0 if "decide" in model.info.capabilities else 8192
        layout = (
            str(model.path),
            self.n_ctx_slot,
            config.kv_unified,
            config.flash_attn,
            config.kv_type,
        )
        self.cache = PromptCache(cache_mib, layout) if cache_mib != 0 else None
        self._draft_model: Model | None = None
        self._timing = {"step": 0.0, "step_n": 0, "row": 0.0, "row_n": 0}
        try:
            self.speculators: list[Speculator] = self._make_speculators(config, threads)
        except BaseException:
            llama_cpp.llama_free(ctx)
            raise
        self._batch = Batch(self.n_batch)
        self._slots = [_Slot(i) for i in range(config.n_parallel)]
        self._queue: deque[tuple[GenerationStream, GenerationRequest]] = deque()
        self._cancels: deque[GenerationStream] = deque()
        self._forces: deque[tuple[GenerationStream, list[int]]] = deque()
        self._cv = threading.Condition()
        self._closing = False
        self._draining = False  # a shutdown under way: running requests finish, no new ones
        self.stats = EngineStats()
        self._thread = threading.Thread(target=self._run, name="llamactl-decode", daemon=True)
        self._thread.start()

    def _make_speculators(self, config: EngineConfig, threads: int) -> list[Speculator]:
        types = parse_spec_types(config.spec_types)
        if config.model_draft is not None and not types:
            types = ("draft-simple",)
        if types and not self._can_trim:
            log.warning("speculative decoding is off: %s cannot trim its memory", self.model.path)
            return []
        if not 1 <= config.spec_draft_n_max <= 48:  # a draft and its row stay under 64
            raise InvalidRequestError("spec_draft_n_max must be between 1 and 48")
        out: list[Speculator] = []
        for name in types:
            if name == "ngram-simple":
                out.append(NgramSimple())
            elif name == "ngram-cache":
                out.append(NgramCache())
            else:
                if config.model_draft is None:
                    raise InvalidRequestError("draft-simple needs a draft model (--model-draft)")
                self._draft_model = Model(config.model_draft)
                try:
                    out.append(
                        DraftModel(
                            self._draft_model,
                            self.model,
                            config.n_parallel,
                            self.n_ctx_slot,
                            self.n_batch,
                            threads,
                            config.spec_draft_p_min,
                        )
                    )
                except BaseException:
                    self._draft_model.close()
                    raise
        return out

    # ================================================================ public API
    def submit(self, request: GenerationRequest) -> GenerationStream:
        """Queue a generation; events arrive on the returned stream."""
        self._validate(request)
        stream = GenerationStream(request.n, self._request_cancel)
        stream.has_reasoning = request.reasoning is not None
        with self._cv:
            if self._closing or self._draining:
                raise EngineClosedError("the server is shutting down")
            if self.config.max_queue and len(self._queue) >= self.config.max_queue:
                raise QueueFullError(
                    f"the server is busy: {len(self._queue)} requests are already waiting"
                )
            self._queue.append((stream, request))
            self.stats.requests_total += 1
            self._cv.notify()
        return stream

    def generate(self, prompt: list[int], **kwargs: object) -> GenerationStream:
        return self.submit(GenerationRequest(prompt=prompt, **kwargs))  # type: ignore[arg-type]

    def force_tokens(self, stream: GenerationStream, tokens: list[int]) -> bool:
        """Make every live choice of `stream` emit `tokens` next (e.g. end of reasoning)."""
        if stream.finished or not tokens:
            return False
        with self._cv:
            self._forces.append((stream, list(tokens)))
            self._cv.notify()
        return True

    def end_reasoning(self, stream: GenerationStream) -> bool:
        """End the reasoning of every choice of `stream` that is reasoning now.

        Decided on the decode thread, so a choice that has just closed its reasoning block
        is left alone. Returns False when the request has no reasoning spec or is finished.
        """
        if stream.finished or not stream.has_reasoning:
            return False
        with self._cv:
            self._forces.append((stream, []))
            self._cv.notify()
        return True

    def tokenize(self, text: str, *, add_special: bool = True) -> list[int]:
        return self.model.tokenize(text, add_special=add_special)

    @property
    def busy_slots(self) -> int:
        return sum(1 for s in self._slots if s.busy)

    @property
    def queue_depth(self) -> int:
        return len(self._queue)

    def drain(self) -> None:
        """Take no new requests and end the queued ones; running ones go on to their end (the
        first step of a graceful shutdown, `close` the last)."""
        err = EngineClosedError("the server is shutting down; this request was not started")
        with self._cv:
            self._draining = True
            queued = list(self._queue)
            self._queue.clear()
        for stream, _ in queued:
            stream._push(err)

    def close(self) -> None:
        """Stop the decode thread, end every open stream, free the context."""
        with self._cv:
            if self._closing:
                return
            self._closing = True
            self._cv.notify()
        self._thread.join()
        err = EngineClosedError("the engine shut down before this request finished")
        for slot in self._slots:
            if slot.stream is not None:
                slot.stream._push(err)
        for stream, _ in self._queue:
            stream._push(err)
        self._queue.clear()
        for slot in self._slots:
            slot.free_samplers()
        self._batch.free()
        for spec in self.speculators:
            if isinstance(spec, DraftModel):
                spec.close()
        if self._draft_model is not None:
            self._draft_model.close()
        llama_cpp.llama_free(self._ctx)
        self._ctx = None

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ============================================================ validation
    def _validate(self, r: GenerationRequest) -> None:
        if not r.prompt:
            raise InvalidRequestError("the prompt is empty")
        if not 1 <= r.n <= self.config.n_parallel:
            raise InvalidRequestError(
                f"n must be between 1 and the number of slots ({self.config.n_parallel}), got {r.n}"
            )
        if r.max_tokens is not None and r.max_tokens < 0:
            raise InvalidRequestError("max_tokens must not be negative")
        bad = [t for t in r.prompt if not 0 <= t < self.model.n_vocab]
        if bad:
            raise InvalidRequestError(
                f"the prompt holds token ids outside the vocabulary: {bad[:5]}"
            )
        if len(r.prompt) >= self.n_ctx_slot:
            raise ContextLengthError(len(r.prompt), self.n_ctx_slot)
        if r.sampling.grammar:
            check_grammar(self.model.vocab, r.sampling.grammar)

    def _request_cancel(self, stream: GenerationStream) -> None:
        with self._cv:
            self._cancels.append(stream)
            self._cv.notify()

    # ============================================================ decode loop
    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._closing and not self._has_work():
                    self._cv.wait()
                if self._closing:
                    return
                cancels, self._cancels = list(self._cancels), deque()
                forces, self._forces = list(self._forces), deque()
            try:
                self._apply_cancels(cancels)
                self._apply_forces(forces)
                self._admit()
                self._step()
            except Exception as exc:  # never let the decode thread die silently
                log.exception("decode step failed")
                self._fail_all(exc)

    def _has_work(self) -> bool:
        return bool(
            self._cancels
            or self._forces
            or any(s.state in ("prompt", "generating") for s in self._slots)
            or (self._queue and self._free_slot_count() >= self._queue[0][1].n)
        )

    def _free_slot_count(self) -> int:
        return sum(1 for s in self._slots if not s.busy)

    # ------------------------------------------------------------ commands
    def _apply_cancels(self, cancels: list[GenerationStream]) -> None:
        for stream in cancels:
            with self._cv:
                queued = [item for item in self._queue if item[0] is stream]
                for item in queued:
                    self._queue.remove(item)
            for _, req in queued:
                for i in range(req.n):
                    stream._push(
                        Done("cancelled", Usage(prompt_tokens=len(req.prompt)), Timings(), index=i)
                    )
            for slot in self._slots:
                if slot.stream is stream:
                    self._finish(slot, "cancelled")

    def _apply_forces(self, forces: list[tuple[GenerationStream, list[int]]]) -> None:
        """Explicit tokens go to every live choice; an empty list means "end reasoning"."""
        for stream, tokens in forces:
            for slot in self._slots:
                if slot.stream is not stream or slot.state == "idle":
                    continue
                if tokens:
                    slot.forced.extend(tokens)
                else:
                    self._force_reasoning_end(slot)

    def _force_reasoning_end(self, slot: _Slot) -> None:
        spec = slot.request.reasoning
        if spec is not None and slot.in_reasoning and not slot.forced:
            slot.forced.extend(spec.end_tokens)
            slot.in_reasoning = False  # no second force while these tokens drain

    # ------------------------------------------------------------ admission
    def _admit(self) -> None:
        """Move waiting requests into free slots, first come first served."""
        while True:
            with self._cv:
                if not self._queue or self._free_slot_count() < self._queue[0][1].n:
                    return
                stream, req = self._queue.popleft()
            if stream.cancelled:
                continue
            try:
                self._start(stream, req)
            except Exception as exc:
                stream._push(exc if isinstance(exc, LlamactlError) else LlamactlError(str(exc)))

    def _pick_slot(self, prompt: list[int], use_cache: bool) -> tuple[_Slot, int]:
        """The free slot sharing the largest share of `prompt` (above the similarity
        threshold), else the least recently used one."""
        free = [s for s in self._slots if not s.busy]
        best, best_lcp = None, 0
        threshold = self.config.slot_prompt_similarity
        if use_cache and threshold > 0:
            for s in free:
                lcp = common_prefix(s.kv_tokens, prompt)
                if lcp > best_lcp and lcp / len(prompt) > threshold:
                    best, best_lcp = s, lcp
        if best is None:
            best = min(free, key=lambda s: s.last_used)
            best_lcp = common_prefix(best.kv_tokens, prompt) if use_cache else 0
        return best, best_lcp

    def _start(self, stream: GenerationStream, req: GenerationRequest) -> None:
        use_cache = self.config.cache_prompt and req.cache_prompt
        parent, lcp = self._pick_slot(req.prompt, use_cache)
        if self.cache is not None:
            self._offer_to_cache(parent, lcp)
            if use_cache:
                lcp = self._restore_from_cache(parent, req.prompt, lcp)
        keep = self._reuse_prefix(parent, req.prompt, lcp if use_cache else 0)
        now = time.perf_counter()
        slots = [parent]
        for _ in range(req.n - 1):
            child = min(
                (s for s in self._slots if not s.busy and s not in slots), key=lambda s: s.last_used
            )
            if self.cache is not None:
                self._offer_to_cache(child, 0, idle=True)
            self._clear_kv(child)
            slots.append(child)
        if self.cache is not None and self.config.kv_unified and self.config.cache_idle_slots:
            # one KV buffer for all: idle slots go to the cache, freeing cells for this task
            for s in self._slots:
                if not s.busy and s not in slots and s.kv_tokens:
                    self._offer_to_cache(s, 0, idle=True)
                    self._clear_kv(s)
        try:
            for i, slot in enumerate(slots):
                sampling = req.sampling
                if i and sampling.seed is not None:  # children differ: seed + k
                    sampling = _with_seed(sampling, sampling.seed + i)
                slot.sampler = SamplerChain(self.model.vocab, self.model.n_vocab, sampling)
                if sampling.grammar and req.reasoning is not None:
                    slot.free_sampler = SamplerChain(
                        self.model.vocab, self.model.n_vocab, replace(sampling, grammar=None)
                    )
        except Exception:
            for slot in slots:
                slot.free_samplers()
                slot._reset_job()
            raise
        for i, slot in enumerate(slots):
            slot.stream, slot.request, slot.index = stream, req, i
            slot.detok = IncrementalDetokenizer(self._piece_fn(req.render_special))
            slot.stops = StopMatcher(req.stop)
            slot.t_start = now
            slot.cached = keep
            slot.saveable = False
            slot.in_reasoning = req.reasoning is not None and req.reasoning.open
            if slot.in_reasoning and req.reasoning.budget == 0:
                self._force_reasoning_end(slot)
            slot.state = "waiting_parent" if i else "prompt"
        parent.children = slots[1:]
        parent.prompt_pos = keep
        if self._checkpoints:
            parent.checkpoint_at = self._checkpoint_positions(parent, req, keep)
        stream.cached_tokens = keep
        stream.admitted.set()
        self.stats.prompt_tokens_cached += keep

    # ------------------------------------------------------------ prompt cache
    def _offer_to_cache(self, slot: _Slot, lcp: int, *, idle: bool = False) -> None:
        """Save a finished completion's KV before a new request overwrites it (once): the
        slot a request takes when the request keeps less than half of it (llama-server's
        rule), and, with `cache_idle_slots`, other idle slots whose KV a request needs."""
        if not slot.saveable or not slot.kv_tokens:
            return
        n = len(slot.kv_tokens)
        if lcp >= n:  # the new prompt extends it: nothing is lost
            return
        if idle and not self.config.cache_idle_slots:
            return
        if not idle and lcp / n >= 0.5:
            return
        slot.saveable = False
        if self.cache.contains(slot.kv_tokens):
            return
        state = save_seq(self._ctx, slot.seq_id)
        if state is None:
            return
        entry = CacheEntry(list(slot.kv_tokens), state, self.cache.layout, list(slot.checkpoints))
        drafter = self._drafter()
        if drafter is not None and drafter.tokens[slot.seq_id]:
            entry.draft_state = save_seq(drafter.ctx, slot.seq_id)
            if entry.draft_state is not None:
                entry.draft_tokens = list(drafter.tokens[slot.seq_id])
        if self.cache.add(entry):
            log.debug("prompt cache: saved %d tokens of slot %d", n, slot.seq_id)

    def _restore_from_cache(self, slot: _Slot, prompt: list[int], lcp: int) -> int:
        """Load the cached state that serves `prompt` better than the slot's own KV;
        return the new common prefix."""
        entry = self.cache.take(prompt, lcp, len(slot.kv_tokens))
        if entry is None:
            return lcp
        self._clear_kv(slot)
        if not load_seq(self._ctx, slot.seq_id, entry.state):
            log.warning("prompt cache: llama.cpp refused a saved state; decoding instead")
            self._clear_kv(slot)
            return 0
        slot.kv_tokens = list(entry.tokens)
        slot.checkpoints = list(entry.checkpoints)
        drafter = self._drafter()
        if drafter is not None and entry.draft_state is not None:
            drafter.clear(slot.seq_id)
            if load_seq(drafter.ctx, slot.seq_id, entry.draft_state):
                drafter.tokens[slot.seq_id] = list(entry.draft_tokens)
            else:
                drafter.clear(slot.seq_id)
        lcp = common_prefix(entry.tokens, prompt)
        self.cache.stats.tokens_restored += lcp
        log.debug("prompt cache: restored %d tokens into slot %d", len(entry.tokens), slot.seq_id)
        return lcp

    # ------------------------------------------------------------ checkpoints
    def _checkpoint_positions(self, slot: _Slot, req: GenerationRequest, keep: int) -> list[int]:
        """Where to stop prompt chunks and checkpoint: before the last user message, before
        earlier ones `checkpoint_min_step` apart, and 4 tokens before the prompt's end."""
        n = len(req.prompt)
        step = self.config.checkpoint_min_step
        last = slot.checkpoints[-1].n_tokens if slot.checkpoints else None
        starts = [p for p in req.user_starts if 0 < p < n]
        out: list[int] = []
        for p in starts:
            if p <= keep:
                continue
            if p == starts[-1] or last is None or p - last >= step:
                out.append(p)
                last = p
        near_end = n - 4
        if near_end > keep and near_end > (out[-1] if out else 0):
            out.append(near_end)
        return out

    def _make_checkpoint(self, slot: _Slot) -> None:
        n = len(slot.kv_tokens)
        if any(c.n_tokens == n for c in slot.checkpoints):
            return
        if llama_cpp.llama_memory_seq_pos_min(self._mem, slot.seq_id) < 0:
            return
        data = save_seq(self._ctx, slot.seq_id, partial=True)
        if data is None:
            return
        while len(slot.checkpoints) >= self.config.ctx_checkpoints:
            slot.checkpoints.pop(0)
        slot.checkpoints.append(Checkpoint(n, data))
        self.stats.checkpoints_made += 1

    def _piece_fn(self, special: bool) -> Callable[[int], bytes]:
        model = self.model
        return lambda t: model.token_bytes(t, special=special)

    def _reuse_prefix(self, slot: _Slot, prompt: list[int], lcp: int) -> int:
        """Trim the slot's KV to the shared prefix; return how many prompt tokens it keeps.

        At least the last prompt token is always decoded again: its logits are needed.
        """
        keep = min(lcp, len(prompt) - 1)
        if keep <= 0:
            self._clear_kv(slot)
            return 0
        if keep < len(slot.kv_tokens):
            if not self._can_trim:  # roll the recurrent state back to a checkpoint
                keep = self._rollback(slot, keep)
                if keep == 0:
                    return 0
            elif not llama_cpp.llama_memory_seq_rm(self._mem, slot.seq_id, keep, -1):
                self._clear_kv(slot)
                return 0
            del slot.kv_tokens[keep:]
        return keep

    def _rollback(self, slot: _Slot, keep: int) -> int:
        """Restore the latest checkpoint at or before `keep` and trim the attention KV after
        it; return the tokens kept (0: the slot was cleared)."""
        usable = [c for c in slot.checkpoints if 0 < c.n_tokens <= keep]
        if usable:
            cp = usable[-1]
            if load_seq(self._ctx, slot.seq_id, cp.data, partial=True) and (
                llama_cpp.llama_memory_seq_rm(self._mem, slot.seq_id, cp.n_tokens, -1)
            ):
                slot.checkpoints = [c for c in slot.checkpoints if c.n_tokens <= cp.n_tokens]
                return cp.n_tokens
        self._clear_kv(slot)
        return 0

    def _clear_kv(self, slot: _Slot) -> None:
        llama_cpp.llama_memory_seq_rm(self._mem, slot.seq_id, -1, -1)
        slot.kv_tokens = []
        slot.checkpoints = []
        slot.saveable = False

    # ------------------------------------------------------------ one step
    def _step(self) -> None:
        """One step: every generating slot's token (and draft) plus small prompt chunks in
        one batch, then at most one large prompt chunk decoded on its own."""
        batch = self._batch
        batch.clear()
        sample_rows: list[tuple[_Slot, int]] = []
        # 1. one token for every generating slot (they were admitted first), and its draft
        drafts = self._drafts() if self.speculators else {}
        verify: list[tuple[_Slot, list[int], list[int], Speculator]] = []
        for slot in self._slots:
            if slot.state == "generating" and slot.pending is not None:
                base = len(slot.kv_tokens)
                row = batch.add(slot.pending, base, slot.seq_id, True)
                if slot.seq_id in drafts:
                    spec, draft = drafts[slot.seq_id]
                    rows = [row]
                    for k, token in enumerate(draft):
                        rows.append(batch.add(token, base + 1 + k, slot.seq_id, True))
                    verify.append((slot, rows, draft, spec))
                else:
                    sample_rows.append((slot, row))
        # 2. prompt chunks, oldest request first, while the batch has room. ggml's CPU flash
        # attention computes a sequence's rows differently once a ubatch holds EXACT_PIECE or
        # more of them, and llama.cpp splits a batch so that each sequence has as many rows as
        # the others in a ubatch. A chunk that large is therefore decoded alone and whole, at
        # the same boundaries whatever else runs: outputs never depend on the company.
        prompt_chunks: list[tuple[_Slot, int]] = []
        big: tuple[_Slot, int] | None = None
        for slot in sorted(
            (s for s in self._slots if s.state == "prompt"), key=lambda s: s.t_start
        ):
            end = self._chunk_end(slot)
            need = min(end - slot.prompt_pos, self.n_batch)
            if need >= EXACT_PIECE:
                if big is None:
                    big = (slot, need)
                continue
            take = min(batch.free_rows, need)
            if take <= 0:
                continue
            self._add_prompt(batch, slot, take, sample_rows)
            prompt_chunks.append((slot, take))
        if batch.n_tokens:
            self._decode_and_sample(batch, sample_rows, prompt_chunks, verify)
        if big is not None and big[0].state == "prompt":
            batch.clear()
            rows: list[tuple[_Slot, int]] = []
            self._add_prompt(batch, big[0], big[1], rows)
            self._decode_and_sample(batch, rows, [big], [])

    def _chunk_end(self, slot: _Slot) -> int:
        """Where the slot's next prompt chunk must end: the prompt's end or a checkpoint
        (taken here, between steps, when the slot has just reached one)."""
        end = len(slot.request.prompt)
        if slot.checkpoint_at:
            while slot.checkpoint_at and slot.checkpoint_at[0] <= slot.prompt_pos:
                if slot.checkpoint_at.pop(0) == slot.prompt_pos:
                    self._make_checkpoint(slot)
            if slot.checkpoint_at:
                end = slot.checkpoint_at[0]
        return end

    def _add_prompt(
        self, batch: Batch, slot: _Slot, take: int, sample_rows: list[tuple[_Slot, int]]
    ) -> None:
        prompt = slot.request.prompt
        for k in range(take):
            pos = slot.prompt_pos + k
            last = pos == len(prompt) - 1
            row = batch.add(prompt[pos], pos, slot.seq_id, last)
            if last:
                sample_rows.append((slot, row))

    def _decode_and_sample(
        self,
        batch: Batch,
        sample_rows: list[tuple[_Slot, int]],
        prompt_chunks: list[tuple[_Slot, int]],
        verify: list[tuple[_Slot, list[int], list[int], Speculator]],
    ) -> None:
        t0 = time.perf_counter()
        rc = llama_cpp.llama_decode(self._ctx, batch.raw)
        if rc != 0:
            self._decode_failed(rc, sample_rows + [(v[0], 0) for v in verify], prompt_chunks)
            return
        elapsed = time.perf_counter() - t0
        self.stats.decode_calls += 1
        self.stats.decode_seconds += elapsed
        if self.speculators and not prompt_chunks:
            self._time_step(elapsed, sum(len(v[2]) for v in verify))
        # 3. book-keeping: what the KV now holds
        for slot, take in prompt_chunks:
            prompt = slot.request.prompt
            slot.kv_tokens.extend(prompt[slot.prompt_pos : slot.prompt_pos + take])
            slot.prompt_pos += take
            self.stats.prompt_tokens_processed += take
        now = time.perf_counter()
        for slot, _row in sample_rows:
            if slot.state == "generating":
                slot.kv_tokens.append(slot.pending)
                slot.pending = None
            else:  # prompt finished in this step
                slot.t_prompt_done = now
                slot.state = "generating"
                for child in slot.children:
                    self._fork(slot, child, now)
        # 4. sample every slot from its own row; drafted slots row after row
        for slot, row in sample_rows:
            for target in [slot, *slot.children] if slot.children else [slot]:
                if target.state == "generating" and target.pending is None:
                    self._sample(target, row)
            slot.children = []
        for slot, rows, draft, spec in verify:
            self._verify(slot, rows, draft, spec)

    # ------------------------------------------------------------ speculation
    def _drafts(self) -> dict[int, tuple[Speculator, list[int]]]:
        """A draft for each generating slot whose best speculator expects to gain tokens."""
        live = [s for s in self._slots if s.state == "generating" and s.pending is not None]
        budget = self.n_batch - len(live)
        n_min = max(1, self.config.spec_draft_n_min)
        out: dict[int, tuple[Speculator, list[int]]] = {}
        model_jobs: list[tuple[_Slot, list[int], int]] = []
        drafter: DraftModel | None = None
        for slot in live:
            if slot.forced:
                continue
            req = slot.request
            n_max = min(self.config.spec_draft_n_max, budget)
            n_max = min(n_max, self.n_ctx_slot - len(slot.kv_tokens) - 2)
            if req.max_tokens is not None:
                n_max = min(n_max, req.max_tokens - len(slot.generated) - 1)
            if n_max < n_min:
                continue
            history = [*slot.kv_tokens, slot.pending]
            best: Speculator | None = None
            best_draft: list[int] = []
            best_gain = 0.0
            slot.spec.rounds += 1
            for spec in self.speculators:
                survival = self._scaled_survival(spec, slot.spec, n_max)
                n = self._worth_drafting(survival, n_max, slot.spec.rounds)
                if n < n_min:
                    continue
                if isinstance(spec, DraftModel):
                    draft, gain = [], sum(survival[:n])
                else:
                    draft = spec.draft(slot.spec, history, n)
                    gain = sum(survival[: len(draft)]) if len(draft) >= n_min else 0.0
                if gain > best_gain:
                    best, best_draft, best_gain = spec, draft, gain
                    if isinstance(spec, DraftModel):
                        n_model = n
            if best is None:
                continue
            if isinstance(best, DraftModel):
                drafter = best
                model_jobs.append((slot, history, n_model))
                budget -= n_model
            else:
                out[slot.seq_id] = (best, best_draft)
                budget -= len(best_draft)
        if drafter is not None:
            made = drafter.draft_many([(s.seq_id, h, n) for s, h, n in model_jobs])
            for slot, _, _ in model_jobs:
                draft = made.get(slot.seq_id, [])
                if len(draft) >= n_min:
                    out[slot.seq_id] = (drafter, draft)
        return out

    def _drafter(self) -> DraftModel | None:
        return next((s for s in self.speculators if isinstance(s, DraftModel)), None)

    @staticmethod
    def _scaled_survival(spec: Speculator, seq: SeqState, n: int) -> list[float]:
        """The speculator's per-position survival, scaled by how this request's drafts fare
        against its overall record (expected accepted tokens = the sum over the draft)."""
        survival = spec.survival(n)
        g = spec.stats
        overall = (g.accepted + 1) / (g.drafted + 2)
        scale = spec.rate(seq) / overall
        return [min(1.0, p * scale) for p in survival]

    def _worth_drafting(self, survival: list[float], n_max: int, rounds: int) -> int:
        """How many draft tokens pay for their rows: position i is kept with probability
        survival[i] and costs `row_cost` of a step (a share measured on this machine: near 0
        where decoding is memory-bound, much of a step on a small CPU). A speculator too poor
        to draft still gets a one-token probe every 8 rounds, so its record can recover."""
        if not self.config.spec_adaptive:
            return n_max
        cost = self._row_cost()
        n = 0
        while n < n_max and survival[n] > cost:
            n += 1
        if n == 0 and rounds % 8 == 0:
            return 1
        return n

    def _row_cost(self) -> float:
        """Cost of one more row in a generation step, as a share of the step (prior 0.3)."""
        t = self._timing
        if t["step_n"] < 3 or t["row_n"] < 3:
            return 0.3
        return min(0.95, max(0.01, t["row"] / max(t["step"], 1e-6)))

    def _time_step(self, seconds: float, n_draft_rows: int) -> None:
        """Follow a generation-only step's decode time (EMA): plain steps give the step cost,
        steps with drafts the marginal cost of a draft row."""
        t = self._timing
        if n_draft_rows == 0:
            t["step"] = seconds if t["step_n"] == 0 else 0.8 * t["step"] + 0.2 * seconds
            t["step_n"] += 1
        elif t["step_n"]:
            row = max(0.0, seconds - t["step"]) / n_draft_rows
            t["row"] = row if t["row_n"] == 0 else 0.8 * t["row"] + 0.2 * row
            t["row_n"] += 1

    def _verify(self, slot: _Slot, rows: list[int], draft: list[int], spec: Speculator) -> None:
        """Sample the target at the pending token's row and each draft row in turn; keep the
        draft up to the first token the target did not sample, drop the rest from the KV."""
        seq = slot.spec
        slot.kv_tokens.append(slot.pending)
        slot.pending = None
        slot.draft_n += len(draft)
        accepted = 0
        for i, row in enumerate(rows):
            self._sample(slot, row)
            if slot.state != "generating" or slot.pending is None:
                break  # finished (stop, length, end of generation)
            if i < len(draft) and slot.pending == draft[i]:
                slot.kv_tokens.append(slot.pending)
                slot.pending = None
                accepted += 1
                slot.draft_accepted += 1
                continue
            break
        spec.record(seq, len(draft), accepted)
        llama_cpp.llama_memory_seq_rm(self._mem, slot.seq_id, len(slot.kv_tokens), -1)

    def _fork(self, parent: _Slot, child: _Slot, now: float) -> None:
        """Give a child a copy of the parent's decoded prompt (decoded once, shared)."""
        llama_cpp.llama_memory_seq_cp(self._mem, parent.seq_id, child.seq_id, -1, -1)
        child.kv_tokens = list(parent.kv_tokens)
        child.prompt_pos = parent.prompt_pos
        child.t_prompt_done = now
        child.state = "generating"

    def _sample(self, slot: _Slot, row: int) -> None:
        req = slot.request
        chain = slot.active_sampler()
        if slot.forced:
            token = slot.forced.popleft()
            if chain is not slot.sampler or not req.sampling.grammar:
                chain.accept(token)  # a grammar may not accept a forced token: never feed it one
        else:
            token = chain.sample(self._ctx, row)
        slot.generated.append(token)
        self.stats.tokens_generated += 1
        logprobs = ()
        if req.logprobs is not None:
            logprobs = (
                token_logprobs(
                    self._ctx, row, self.model.n_vocab, token, req.logprobs, self.model.token_text
                ),
            )
        if self.model.is_eog(token) and not req.ignore_eos:
            self._emit(slot, slot.detok.flush() + slot.stops.flush(), (token,), logprobs)
            self._finish(slot, "stop")
            return
        piece = slot.detok.push(token)
        if req.reasoning is not None:
            self._track_reasoning(slot, piece)
        text, stop = slot.stops.push(piece)
        if stop is not None:
            self._emit(slot, text, (token,), logprobs)
            self._finish(slot, "stop", stop)
            return
        self._emit(slot, text, (token,), logprobs)
        if req.max_tokens is not None and len(slot.generated) >= req.max_tokens:
            self._emit(slot, slot.detok.flush() + slot.stops.flush(), (), ())
            self._finish(slot, "length")
            return
        if len(slot.kv_tokens) >= self.n_ctx_slot:  # no position left to decode it at
            self._emit(slot, slot.detok.flush() + slot.stops.flush(), (), ())
            self._finish(slot, "length")
            return
        slot.pending = token

    def _track_reasoning(self, slot: _Slot, piece: str) -> None:
        """Follow the reasoning markers in the output and enforce the budget."""
        spec = slot.request.reasoning
        tail = (slot.marker_tail + piece)[-(len(spec.start) + len(spec.end) + 16) :]
        forcing = bool(slot.forced)
        if slot.in_reasoning or forcing:
            if spec.end in tail:
                slot.in_reasoning = False
                tail = tail[tail.rindex(spec.end) + len(spec.end) :]
            elif slot.in_reasoning:
                slot.reasoning_tokens += 1
                if spec.budget is not None and slot.reasoning_tokens >= spec.budget:
                    self._force_reasoning_end(slot)
        elif spec.start in tail:
            slot.in_reasoning = True
            tail = tail[tail.rindex(spec.start) + len(spec.start) :]
            if spec.budget == 0:
                self._force_reasoning_end(slot)
        slot.marker_tail = tail

    def _emit(self, slot: _Slot, text: str, tokens: tuple[int, ...], logprobs: tuple) -> None:
        if text or logprobs:
            slot.stream._push(TextDelta(text, tokens, logprobs, slot.index))

    def _finish(self, slot: _Slot, reason: FinishReason, stop: str | None = None) -> None:
        """End the slot's generation; the slot is idle before its `Done` is delivered, so a
        caller that sees `Done` can count on the slot being free."""
        now = time.perf_counter()
        req, stream, index = slot.request, slot.stream, slot.index
        for child in slot.children:  # a parent ended before its prompt finished takes them along
            self._finish(child, reason)
        done = None
        if stream is not None and req is not None:
            prompt_done = slot.t_prompt_done or now
            shared = index > 0  # a child: the parent decoded the prompt for it
            timings = Timings(
                prompt_n=0 if shared else len(req.prompt) - slot.cached,
                prompt_ms=0.0 if shared else (prompt_done - slot.t_start) * 1000.0,
                predicted_n=len(slot.generated),
                predicted_ms=(now - prompt_done) * 1000.0 if slot.t_prompt_done else 0.0,
                cache_n=slot.cached,
                draft_n=slot.draft_n if self.speculators else None,
                draft_n_accepted=slot.draft_accepted if self.speculators else None,
            )
            usage = Usage(len(req.prompt), slot.cached, len(slot.generated), slot.reasoning_tokens)
            done = Done(reason, usage, timings, stop, tuple(slot.generated), index)
        slot.free_samplers()
        if index > 0 or slot.state == "waiting_parent":
            self._clear_kv(slot)  # children share their parent's prompt: never cached
        else:
            slot.saveable = self.cache is not None and req is not None and req.cache_prompt
        slot.last_used = now
        slot._reset_job()
        slot.state = "idle"
        if done is not None:
            stream._push(done)

    def _decode_failed(self, rc: int, sample_rows, prompt_chunks) -> None:
        """A failed decode leaves the batch's sequences in an unknown state: end them."""
        err = LlamactlError(f"llama_decode failed (code {rc}); the request was ended")
        involved = {id(s): s for s, _ in sample_rows} | {id(s): s for s, _ in prompt_chunks}
        for slot in involved.values():
            stream = slot.stream
            for child in slot.children:
                self._clear_kv(child)
                child._reset_job()
                child.state = "idle"
            self._clear_kv(slot)
            slot._reset_job()
            slot.state = "idle"
            if stream is not None:
                stream._push(err)

    def _fail_all(self, exc: Exception) -> None:
        err = exc if isinstance(exc, LlamactlError) else LlamactlError(f"engine error: {exc}")
        for slot in self._slots:
            if slot.stream is not None:
                slot.stream._push(err)
                self._clear_kv(slot)
                slot._reset_job()
                slot.state = "idle"


@dataclass
class EngineStats:
    """Counters for /metrics and benchmarks (written by the decode thread only)."""

    requests_total: int = 0
    tokens_generated: int = 0
    prompt_tokens_processed: int = 0
    prompt_tokens_cached: int = 0
    decode_calls: int = 0
    decode_seconds: float = 0.0
    checkpoints_made: int = 0


def _with_seed(params: SamplingParams, seed: int) -> SamplingParams:
    return replace(params, seed=seed)
