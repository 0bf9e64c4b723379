"""The batched engine: one llama.cpp context, `n_parallel` slots, one decode thread.

Each step admits waiting requests into free slots, packs one token per generating slot and
prompt chunks (bounded by `n_batch`) into a single batch, decodes once, then samples every
slot from its own logits row. A slot never reads another slot's logits, and with split KV
streams (`kv_unified = False`) each sequence's logits are bit-identical to a solo run, so
greedy output does not depend on what else is being served.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import llama_cpp

from llamactl.core.errors import (
    ContextLengthError,
    EngineClosedError,
    InvalidRequestError,
    LlamactlError,
)

from ._backend import memory_of
from .batch import Batch
from .cache_persist import PersistedCache
from .context import ChatSizes, open_context, physical_cores, plan_chat
from .detokenize import IncrementalDetokenizer
from .drafting import DraftPolicy
from .kv_reuse import SlotMemory
from .loop import DecodeLoop
from .lora import LoraSet
from .model import Model
from .output import OutputProcessor
from .prompt_cache import PromptCache
from .prompt_chunks import EXACT_PIECE, add_rows, chunk_rows, exact_resume
from .requests import EngineConfig, EngineStats, GenerationRequest, ReasoningSpec
from .sampling import SamplerChain, check_grammar
from .seq_store import SeqStore, SlotFileResult, SlotFiles
from .slot import Slot
from .speculative import DraftModel, Speculator, build_speculators
from .state_file import StateIdentity, model_identity
from .stops import StopMatcher
from .stream import GenerationStream, deliver_pending
from .types import Done, PromptProgress, SamplingParams, SlotInfo, Timings, Usage
from .ubatch import plan_companions

if TYPE_CHECKING:
    from .media_prompt import MediaSpan
    from .projector import Projector

__all__ = [
    "Engine",
    "EngineConfig",
    "EngineStats",
    "GenerationRequest",
    "ReasoningSpec",
    "SlotFileResult",
]

log = logging.getLogger("llamactl.engine")


@dataclass
class _Call:
    """Work for the decode thread between two steps; with a slot, once that slot is idle."""

    slot_id: int | None
    fn: Callable[[Slot | None], Any]
    future: Future[Any] = field(default_factory=Future)
    all_idle: bool = False  # wait until no slot is busy, admitting nothing meanwhile


class Engine(DecodeLoop[tuple[GenerationStream, GenerationRequest]]):
    """Thread-safe front door to one model's batched context."""

    def __init__(self, model: Model, config: EngineConfig | None = None) -> None:
        self.model = model
        self.config = config = config or EngineConfig()
        if config.n_parallel < 1:
            raise InvalidRequestError("n_parallel must be at least 1")
        plan = plan_chat(model, config)
        threads = plan.threads
        self._can_trim = plan.can_trim
        self.kv_type = plan.kv_type
        self._split_kernels = plan.split_kernels
        self._spare_seq = plan.spare_seq
        ctx = open_context(model, plan.layout(config))
        self._ctx = ctx
        try:
            specs = [*((path, 1.0) for path in config.lora), *config.lora_scaled]
            self.lora = LoraSet(model, specs, apply=not config.lora_init_without_apply)
            self.lora.apply(ctx)
        except BaseException:
            llama_cpp.llama_free(ctx)
            raise
        self._mem = memory_of(ctx)
        sizes = ChatSizes.of(ctx, config, plan)
        self.n_ctx, self.n_batch, self.n_ubatch = sizes.n_ctx, sizes.n_batch, sizes.n_ubatch
        self._companions = plan.companions
        self._split_streams = not config.kv_unified and config.n_parallel > 1
        self.n_ctx_seq, self.n_ctx_slot = sizes.n_ctx_seq, sizes.n_ctx_slot
        self._row_budget, self._chunk_budget = sizes.row_budget, sizes.chunk_budget
        # checkpoints where a cut can reach past what the memory holds: a recurrent state,
        # or cells a sliding window has let go
        self._checkpoints = (not self._can_trim or plan.window > 0) and config.ctx_checkpoints > 0
        cache_mib = config.cache_ram_mib
        if cache_mib is None:  # decision states seldom repeat: off unless asked for
            cache_mib = 0 if "decide" in model.info.capabilities else 8192
        layout = (
            str(model.path),
            self.n_ctx_slot,
            config.kv_unified,
            config.flash_attn,
            self.kv_type,
        )
        self._cache_layout = layout  # the prompt cache's key is this plus the LoRA scales
        self.cache = PromptCache(cache_mib, (*layout, self.lora.key)) if cache_mib != 0 else None
        path, size, mtime_ns = model_identity(model.path)
        self.identity = StateIdentity(
            path,
            size,
            mtime_ns,
            self.n_ctx_seq,
            self.kv_type,
            config.kv_unified,
            config.flash_attn,
            self._lora_identity(),
        )
        self.stats = EngineStats()
        self.projector: Projector | None = None  # the mmproj, for prompts with media
        try:
            self.speculators: list[Speculator] = build_speculators(
                config,
                model,
                can_trim=plan.can_speculate,
                n_ctx_slot=self.n_ctx_slot,
                n_batch=self.n_batch,
                threads=threads,
            )
        except BaseException:
            self.lora.close()
            llama_cpp.llama_free(ctx)
            raise
        self._batch = Batch(self.n_batch)
        self._slots = [Slot(i) for i in range(config.n_parallel)]
        self._cancels: deque[GenerationStream] = deque()
        self._forces: deque[tuple[GenerationStream, list[int]]] = deque()
        self._taken_cancels: list[GenerationStream] = []
        self._taken_forces: list[tuple[GenerationStream, list[int]]] = []
        self.memory = SlotMemory(
            ctx,
            config,
            self.cache,
            can_trim=self._can_trim,
            window=plan.window,
            split_kernels=plan.split_kernels,
            stats=self.stats,
            drafter=next((s for s in self.speculators if isinstance(s, DraftModel)), None),
        )
        if config.cache_reuse > 0 and not (self.memory.can_shift and self._can_trim):
            log.warning("--cache-reuse is off: %s cannot shift its memory", model.path)
        self.output = OutputProcessor(
            ctx,
            model,
            self.memory,
            self.stats,
            n_ctx_slot=self.n_ctx_slot,
            speculating=bool(self.speculators),
        )
        self.drafting = DraftPolicy(
            self.speculators, config, row_budget=self._row_budget, n_ctx_slot=self.n_ctx_slot
        )
        self.seq_store = SeqStore(
            ctx, self.memory, n_ctx_slot=self.n_ctx_slot, n_vocab=model.n_vocab
        )
        self.slot_files = SlotFiles(self.seq_store, self.identity, self._on_decode_thread)
        self._calls: deque[_Call] = deque()
        self._deferred: list[_Call] = []  # calls taken by the decode thread, not yet run
        self._disk = self._open_disk_cache(config)
        self._start_loop(max_queue=config.max_queue, thread_name="llamactl-decode")
        if self._disk is not None:
            self._disk.start(config.cache_persist_interval)

    def _open_disk_cache(self, config: EngineConfig) -> PersistedCache | None:
        """The on-disk prompt cache, with its saved prompts loaded into the RAM cache."""
        if config.cache_persist_dir is None:
            return None
        if self.cache is None:
            log.warning("--cache-persist needs the RAM prompt cache (--cache-ram is 0): off")
            return None
        return PersistedCache(
            Path(config.cache_persist_dir),
            self.identity,
            self.cache,
            self.seq_store,
            self._slots,
            self._on_decode_thread,
        )

    def attach_projector(self, path: str | Path) -> None:
        """Pair an mmproj with the model, so prompts may carry its images or audio."""
        from .media_prompt import open_chat_projector

        if self.projector is not None:
            raise InvalidRequestError("this engine already has a projector")
        threads = self.config.n_threads or physical_cores()
        self.projector = open_chat_projector(Path(path), self.model.handle, threads)

    # ================================================================ public API
    def submit(self, request: GenerationRequest) -> GenerationStream:
        """Queue a generation; events arrive on the returned stream."""
        self._validate(request)
        stream = GenerationStream(request.n, self._request_cancel)
        stream.has_reasoning = request.reasoning is not None
        self._enqueue((stream, request), closed="the server is shutting down")
        return stream

    def generate(self, prompt: list[int], **kwargs: Any) -> GenerationStream:
        """`submit` with the request's fields as keywords."""
        return self.submit(GenerationRequest(prompt=prompt, **kwargs))

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
    def kv_usage(self) -> float:
        """The share of the slots' KV cells holding tokens (0 to 1), running or kept for
        reuse: what an inference gateway reads as KV-cache utilisation."""
        total = self.n_ctx_seq * len(self._slots)
        return min(1.0, sum(len(s.kv_tokens) for s in self._slots) / total) if total else 0.0

    def slots_info(self) -> list[SlotInfo]:
        """Each slot's state and its current or last job (`/slots`); safe from any thread."""
        speculative = bool(self.speculators)
        return [slot.info(self.n_ctx_slot, speculative) for slot in self._slots]

    # ------------------------------------------------------------ KV to and from disk
    def persist_cache(self) -> int:
        """Write the prompt cache (and idle slots' prompts) to `--cache-persist`'s directory
        now; return the files written. The states are taken between decode steps, the files
        written on this thread."""
        return self._disk.write_now() if self._disk is not None else 0

    def _on_decode_thread(
        self, slot_id: int | None, fn: Callable[[Any], Any], *, all_idle: bool = False
    ) -> Future[Any]:
        """Run `fn(slot)` on the decode thread between two steps, once slot `slot_id` is idle
        (a busy slot's job ends first, as llama-server defers a slot task); with `all_idle`,
        once every slot is (no request is admitted meanwhile)."""
        if slot_id is not None and not 0 <= slot_id < len(self._slots):
            raise InvalidRequestError("Invalid slot ID")
        call = _Call(slot_id, fn, all_idle=all_idle)
        with self._cv:
            if self._closing:
                raise EngineClosedError("the server is shutting down")
            self._calls.append(call)
            self._cv.notify()
        return call.future

    # ------------------------------------------------------------ LoRA adapters
    def lora_adapters(self) -> list[dict[str, Any]]:
        """The loaded adapters and their global scales (`GET /lora-adapters`)."""
        return self.lora.info(self._token_text)

    def _token_text(self, token: int) -> str:
        return self.model.token_bytes(token, special=True).decode("utf-8", "replace")

    def set_lora_scales(self, entries: Any) -> Future[None]:
        """Set the global scales from llama-server's `[{"id", "scale"}]` (adapters left out
        get 0). Applied between steps once no slot is busy (running requests end under the
        scales they started with); KV computed under other scales is never reused."""
        scales = self.lora.scales_from(entries)
        return self._on_decode_thread(None, lambda _: self._switch_lora(scales), all_idle=True)

    def check_lora(self, entries: Any) -> None:
        """Accept a request's `lora` list only when it equals the global scales: one decode
        applies one set of adapters to the whole batch, so per-request scales cannot be
        served alongside others."""
        if self.lora.scales_from(entries) != self.lora.key:
            raise InvalidRequestError(
                'per-request LoRA scales are not supported: a request\'s "lora" must equal'
                f" the server's scales {list(self.lora.key)}; set them with POST /lora-adapters"
            )

    def _lora_identity(self) -> str:
        return ",".join(f"{a.path}:{a.scale!r}" for a in self.lora.adapters)

    def _switch_lora(self, scales: tuple[float, ...]) -> None:
        """Decode thread, every slot idle: save what the slots hold under the old scales to
        the prompt cache (keyed by them), empty the slots, apply the new scales."""
        if scales == self.lora.key:
            return
        for slot in self._slots:
            if self.cache is not None:
                self.memory.offer(slot, 0, idle=True)
            self.memory.clear(slot)
        self.lora.set_scales(scales)
        self.lora.apply(self._ctx)
        if self.cache is not None:
            self.cache.layout = (*self._cache_layout, self.lora.key)
        self.identity = replace(self.identity, lora=self._lora_identity())
        self.slot_files.identity = self.identity
        if self._disk is not None:
            self._disk.rekey(self.identity)

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
        """Stop the decode thread, end every open stream, write the prompt cache to disk
        (with --cache-persist), free the context."""
        if self._disk is not None:
            self._disk.stop()
        if not self._stop_loop():
            return
        closed = EngineClosedError("the engine shut down before this slot action ran")
        for call in [*self._deferred, *self._calls]:
            if call.future.set_running_or_notify_cancel():
                call.future.set_exception(closed)
        self._deferred, self._calls = [], deque()
        if self._disk is not None:
            self._disk.write_final()
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
                spec.close()  # and its model
        llama_cpp.llama_free(self._ctx)  # once: _stop_loop admits one close, after the last step
        self.lora.close()
        if self.projector is not None:
            self.projector.close()

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
        if r.max_tokens is not None and r.max_tokens < 1:  # the first token is always sampled
            raise InvalidRequestError("max_tokens must be at least 1 (None: no limit)")
        text = r.prompt if r.media is None else self._media_text(r)
        bad = [t for t in text if not 0 <= t < self.model.n_vocab]
        if bad:
            raise InvalidRequestError(
                f"the prompt holds token ids outside the vocabulary: {bad[:5]}"
            )
        if r.slot is not None and not 0 <= r.slot < self.config.n_parallel:
            raise InvalidRequestError("Invalid slot ID")
        if len(r.prompt) >= self.n_ctx_slot:
            raise ContextLengthError(len(r.prompt), self.n_ctx_slot)
        if r.sampling.grammar:
            check_grammar(self.model.vocab, r.sampling.grammar)

    def _media_text(self, r: GenerationRequest) -> list[int]:
        """A prompt with media: its text tokens (placeholders aside), once it is checked to
        be its MediaPrompt's and to end with text (the last position's logits are sampled)."""
        media = r.media
        assert media is not None
        if r.prompt is not media.tokens and r.prompt != media.tokens:
            raise InvalidRequestError("the prompt is not its media prompt's token list")
        if media.spans and media.spans[-1].end >= len(r.prompt):
            raise InvalidRequestError("a prompt with media must end with text")
        return media.text_tokens()

    def _request_cancel(self, stream: GenerationStream) -> None:
        with self._cv:
            self._cancels.append(stream)
            self._cv.notify()

    # ============================================================ decode loop
    def _take_commands(self) -> None:
        self._taken_cancels, self._cancels = list(self._cancels), deque()
        self._taken_forces, self._forces = list(self._forces), deque()
        self._deferred.extend(self._calls)  # decode-thread side from here on
        self._calls.clear()

    def _tick(self) -> None:
        self._apply_cancels(self._taken_cancels)
        self._apply_forces(self._taken_forces)
        self._run_calls()
        self._admit()
        self._step()

    def _has_work(self) -> bool:
        return bool(
            self._cancels
            or self._forces
            or self._calls
            or any(c.slot_id is None or not self._slots[c.slot_id].busy for c in self._deferred)
            or any(s.state in ("prompt", "generating") for s in self._slots)
            or (self._queue and self._can_start(self._queue[0][1]))
        )

    def _free_slot_count(self) -> int:
        return sum(1 for s in self._slots if not s.busy)

    def _can_start(self, req: GenerationRequest) -> bool:
        """Enough free slots for its choices, and the slot it asks for among them."""
        if req.slot is not None and self._slots[req.slot].busy:
            return False
        return self._free_slot_count() >= req.n

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
                    self.output.finish(slot, "cancelled")

    def _apply_forces(self, forces: list[tuple[GenerationStream, list[int]]]) -> None:
        """Explicit tokens go to every live choice; an empty list means "end reasoning"."""
        for stream, tokens in forces:
            for slot in self._slots:
                if slot.stream is not stream or slot.state == "idle":
                    continue
                if tokens:
                    slot.forced.extend(tokens)
                else:
                    self.output.force_reasoning_end(slot)

    def _run_calls(self) -> None:
        """Slot actions and cache snapshots, before admission: a call whose slot is busy
        waits for the slot's job to end."""
        waiting: list[_Call] = []
        for call in self._deferred:
            slot = self._slots[call.slot_id] if call.slot_id is not None else None
            if (slot is not None and slot.busy) or (call.all_idle and self.busy_slots):
                waiting.append(call)
                continue
            if not call.future.set_running_or_notify_cancel():
                continue
            try:
                call.future.set_result(call.fn(slot))
            except Exception as exc:
                call.future.set_exception(exc)
        self._deferred = waiting

    # ------------------------------------------------------------ admission
    def _admit(self) -> None:
        """Move waiting requests into free slots, first come first served."""
        if any(c.all_idle for c in self._deferred):
            return  # a call waits for every slot to be idle
        while True:
            with self._cv:
                if not self._queue or not self._can_start(self._queue[0][1]):
                    return
                stream, req = self._queue.popleft()
            if stream.cancelled:
                continue
            try:
                self._start(stream, req)
            except Exception as exc:
                stream._push(exc if isinstance(exc, LlamactlError) else LlamactlError(str(exc)))

    def _start(self, stream: GenerationStream, req: GenerationRequest) -> None:
        use_cache = self.config.cache_prompt and req.cache_prompt
        parent, lcp = self.memory.pick(self._slots, req.prompt, use_cache, req.slot)
        if self.cache is not None:
            self.memory.offer(parent, lcp)
            if use_cache:
                lcp = self.memory.restore(parent, req.prompt, lcp)
        n_reuse = self.config.cache_reuse if req.n_cache_reuse is None else req.n_cache_reuse
        if not use_cache:
            lcp = n_reuse = 0
        elif req.media is not None:  # a media chunk is kept whole or decoded again, never moved
            lcp, n_reuse = req.media.floor(lcp), 0
        if self._split_kernels and lcp and not n_reuse:  # rows as a cold run makes them
            exact = exact_resume(lcp, len(req.prompt), parent.tiled_rows, req.media)
            # unless going back needs cells a sliding window has let go: then the prefix
            # is kept as it is, as when many of its rows were made otherwise (engine.md)
            if self.memory.can_cut(parent, exact):
                lcp = exact
        keep = self.memory.reuse_prefix(parent, req.prompt, lcp, n_reuse)
        now = time.perf_counter()
        slots = [parent]
        for _ in range(req.n - 1):
            child = min(
                (s for s in self._slots if not s.busy and s not in slots), key=lambda s: s.last_used
            )
            if self.cache is not None:
                self.memory.offer(child, 0, idle=True)
            self.memory.clear(child)
            slots.append(child)
        if self.cache is not None and self.config.kv_unified and self.config.cache_idle_slots:
            # one KV buffer for all: idle slots go to the cache, freeing cells for this task
            for s in self._slots:
                if not s.busy and s not in slots and s.kv_tokens:
                    self.memory.offer(s, 0, idle=True)
                    self.memory.clear(s)
        try:
            for i, slot in enumerate(slots):
                sampling = req.sampling
                if req.ignore_eos:  # as llama-server: end-of-generation tokens are never drawn
                    sampling = _banning(sampling, self.model.eog_tokens)
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
            reasoning = req.reasoning
            slot.in_reasoning = reasoning is not None and reasoning.open
            if reasoning is not None and slot.in_reasoning and reasoning.budget == 0:
                self.output.force_reasoning_end(slot)
            slot.state = "waiting_parent" if i else "prompt"
        parent.children = slots[1:]
        parent.prompt_pos = keep
        if self._checkpoints:
            parent.checkpoint_at = self.memory.checkpoint_positions(parent, req, keep)
        stream.cached_tokens = keep
        stream.slot_id = parent.seq_id
        stream.admitted.set()
        self._report_progress(parent)
        self.stats.prompt_tokens_cached += keep

    def _piece_fn(self, special: bool) -> Callable[[int], bytes]:
        model = self.model
        return lambda t: model.token_bytes(t, special=special)

    # ------------------------------------------------------------ one step
    def _step(self) -> None:
        """One step: every generating slot's token (and draft) plus small prompt chunks in
        one batch, then at most one large prompt chunk decoded on its own."""
        batch = self._batch
        batch.clear()
        sample_rows: list[tuple[Slot, int]] = []
        # 1. one token for every generating slot (they were admitted first), and its draft
        drafts = self.drafting.drafts(self._slots) if self.speculators else {}
        verify: list[tuple[Slot, list[int], list[int], Speculator]] = []
        # an urgent request's first tokens go alone (the others wait a step; their outputs
        # do not depend on the company they decode in, so only their timing changes)
        urgent = [s for s in self._slots if _is_urgent(s)]
        for slot in self._slots:
            if urgent and slot not in urgent:
                continue
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
        prompt_chunks: list[tuple[Slot, int]] = []
        big: tuple[Slot, int] | None = None
        media_job: tuple[Slot, MediaSpan] | None = None  # one media chunk a step, alone
        for slot in sorted(
            (s for s in self._slots if s.state == "prompt" and (not urgent or s in urgent)),
            key=lambda s: s.t_start,
        ):
            end = self._chunk_end(slot)
            media = slot.job_request.media
            if media is not None:  # text chunks stop where a media chunk starts
                span = media.span_at(slot.prompt_pos)
                if span is not None:
                    media_job = media_job or (slot, span)
                    continue
                end = min(end, media.next_start(slot.prompt_pos) or end)
            if self._split_kernels:  # the same rows tiled, cold or warm (prompt_chunks.py)
                n_prompt = len(slot.job_request.prompt)
                need = chunk_rows(slot.prompt_pos, end, n_prompt, self._chunk_budget)
            else:
                need = min(end - slot.prompt_pos, self._row_budget)
            if need >= EXACT_PIECE:
                if big is None:
                    big = (slot, need)
                continue
            take = min(self._row_budget - batch.n_tokens, need)
            if take <= 0:
                continue
            self._add_prompt(batch, slot, take, sample_rows)
            prompt_chunks.append((slot, take))
        if batch.n_tokens:
            self._decode_and_sample(batch, sample_rows, prompt_chunks, verify)
        if big is not None and big[0].state == "prompt":
            batch.clear()
            big_rows: list[tuple[Slot, int]] = []
            self._add_prompt(batch, big[0], big[1], big_rows)
            self._decode_and_sample(batch, big_rows, [big], [])
        if media_job is not None and media_job[0].state == "prompt":
            self._decode_media(*media_job)

    def _decode_media(self, slot: Slot, span: MediaSpan) -> None:
        """Encode one media chunk and decode its embeddings into the slot's sequence, on
        their own (at the same boundaries whatever else runs)."""
        media = slot.job_request.media
        assert media is not None
        try:
            media.decode(span, self._ctx, slot.seq_id, self.n_batch)
        except LlamactlError as exc:
            self._end_jobs([slot], exc)
            return
        slot.kv_tokens.extend(slot.job_request.prompt[span.start : span.end])
        slot.prompt_pos = span.end
        self.stats.prompt_tokens_processed += span.n_tokens
        self._report_progress(slot)

    def _report_progress(self, slot: Slot) -> None:
        """Where the slot's prompt stands, to a request that asked (`report_progress`)."""
        req = slot.job_request
        if req.report_progress and slot.index == 0:
            elapsed_ms = (time.perf_counter() - slot.t_start) * 1000.0
            progress = PromptProgress(len(req.prompt), slot.cached, slot.prompt_pos, elapsed_ms)
            slot.job_stream._push(progress)

    def _chunk_end(self, slot: Slot) -> int:
        """Where the slot's next prompt chunk must end: the prompt's end or a checkpoint
        (taken here, between steps, when the slot has just reached one)."""
        end = len(slot.job_request.prompt)
        if slot.checkpoint_at:
            while slot.checkpoint_at and slot.checkpoint_at[0] <= slot.prompt_pos:
                if slot.checkpoint_at.pop(0) == slot.prompt_pos:
                    self.memory.checkpoint(slot)
            if slot.checkpoint_at:
                end = slot.checkpoint_at[0]
        return end

    def _add_prompt(
        self, batch: Batch, slot: Slot, take: int, sample_rows: list[tuple[Slot, int]]
    ) -> None:
        prompt = slot.job_request.prompt
        for k in range(take):
            pos = slot.prompt_pos + k
            last = pos == len(prompt) - 1
            row = batch.add(prompt[pos], pos, slot.seq_id, last)
            if last:
                sample_rows.append((slot, row))

    def _decode_and_sample(
        self,
        batch: Batch,
        sample_rows: list[tuple[Slot, int]],
        prompt_chunks: list[tuple[Slot, int]],
        verify: list[tuple[Slot, list[int], list[int], Speculator]],
    ) -> None:
        companions = self._add_companions(batch) if self._companions else ()
        t0 = time.perf_counter()
        rc = llama_cpp.llama_decode(self._ctx, batch.raw)
        for seq_id, pos in companions:
            llama_cpp.llama_memory_seq_rm(self._mem, seq_id, pos, -1)
        if rc != 0:
            self._decode_failed(rc, sample_rows + [(v[0], 0) for v in verify], prompt_chunks)
            return
        elapsed = time.perf_counter() - t0
        self.stats.decode_calls += 1
        self.stats.decode_seconds += elapsed
        self.stats.busy_slot_steps += sum(1 for s in self._slots if s.busy)
        if self.speculators and not prompt_chunks:
            self.drafting.time_step(elapsed, sum(len(v[2]) for v in verify))
        # 3. book-keeping: what the KV now holds
        for slot, take in prompt_chunks:
            prompt = slot.job_request.prompt
            slot.kv_tokens.extend(prompt[slot.prompt_pos : slot.prompt_pos + take])
            if take >= EXACT_PIECE and slot.tiled_rows is not None:
                add_rows(slot.tiled_rows, slot.prompt_pos, slot.prompt_pos + take)
            slot.prompt_pos += take
            self.stats.prompt_tokens_processed += take
            self._report_progress(slot)
        now = time.perf_counter()
        for slot, _row in sample_rows:
            if slot.state == "generating":
                slot.commit_pending()
            else:  # prompt finished in this step
                slot.t_prompt_done = now
                slot.state = "generating"
                for child in slot.children:
                    self.memory.fork(slot, child, now)
        # 4. sample every slot from its own row; drafted slots row after row
        for slot, row in sample_rows:
            for target in [slot, *slot.children] if slot.children else [slot]:
                if target.state == "generating" and target.pending is None:
                    self.output.sample(target, row)
            slot.children = []
        for slot, rows, draft, spec in verify:
            self._verify(slot, rows, draft, spec)
        deliver_pending()  # before a prompt chunk or media decoded next in this step

    def _add_companions(self, batch: Batch) -> list[tuple[int, int]]:
        """Give every row llama.cpp would compute alone a companion (see ubatch.py); return
        the (sequence, position) of each, to remove after decoding."""
        plan = plan_companions(
            batch.seq_ids,
            batch.positions,
            self.n_ubatch,
            streams=self._split_streams,
            n_seqs=self.config.n_parallel,
            next_pos=lambda seq: llama_cpp.llama_memory_seq_pos_max(self._mem, seq) + 1,
            room=batch.free_rows,
            spare=self._spare_seq,
        )
        token = batch.raw.token[0]
        for seq, pos in plan:
            batch.add(token, pos, seq, False)
        return plan

    def _verify(self, slot: Slot, rows: list[int], draft: list[int], spec: Speculator) -> None:
        """Sample the target at the pending token's row and each draft row in turn; keep the
        draft up to the first token the target did not sample, drop the rest from the KV."""
        seq = slot.spec
        slot.commit_pending()
        slot.draft_n += len(draft)
        accepted = 0
        for i, row in enumerate(rows):
            self.output.sample(slot, row)
            if slot.state != "generating" or slot.pending is None:
                break  # finished (stop, length, end of generation)
            if i < len(draft) and slot.pending == draft[i]:
                slot.commit_pending()
                accepted += 1
                slot.draft_accepted += 1
                continue
            break
        spec.record(seq, len(draft), accepted)
        self.memory.trim(slot, len(slot.kv_tokens))

    def _decode_failed(self, rc: int, sample_rows, prompt_chunks) -> None:
        """A failed decode leaves the batch's sequences in an unknown state: end them."""
        err = LlamactlError(f"llama_decode failed (code {rc}); the request was ended")
        involved = {id(s): s for s, _ in sample_rows} | {id(s): s for s, _ in prompt_chunks}
        self._end_jobs(list(involved.values()), err)

    def _end_jobs(self, slots: list[Slot], err: LlamactlError) -> None:
        """End the jobs of `slots` (and their waiting children) with `err`, clearing their KV."""
        for slot in slots:
            stream = slot.stream
            for child in slot.children:
                self.memory.clear(child)
                child._reset_job()
                child.state = "idle"
            self.memory.clear(slot)
            slot._reset_job()
            slot.state = "idle"
            if stream is not None:
                stream._push(err)

    def _fail_all(self, exc: Exception) -> None:
        err = exc if isinstance(exc, LlamactlError) else LlamactlError(f"engine error: {exc}")
        for slot in self._slots:
            if slot.stream is not None:
                slot.stream._push(err)
                self.memory.clear(slot)
                slot._reset_job()
                slot.state = "idle"


def _banning(params: SamplingParams, tokens: tuple[int, ...]) -> SamplingParams:
    bias = {**params.logit_bias, **{t: float("-inf") for t in tokens}}
    return replace(params, logit_bias=bias)


def _with_seed(params: SamplingParams, seed: int) -> SamplingParams:
    return replace(params, seed=seed)


def _is_urgent(slot: Slot) -> bool:
    """Is the slot's request still within its urgent first tokens?"""
    request = slot.request
    return (
        request is not None
        and slot.state in ("prompt", "generating")
        and len(slot.generated) < request.urgent_tokens
    )
