"""`DecisionEngine`: scores decision requests on one llama.cpp context, with no generation.

Each question is a task (a prompt to evaluate once). Tasks run in `n_parallel` slots, batched:
each step packs prompt chunks of every busy slot into one `llama_batch` and decodes once. The
tasks of one request are grouped in blocks of `n_parallel`; the first task of a block (the
parent) decodes the prefix the block shares, then every other task gets a whole-sequence copy
of it (`seq_cp`; a partial copy kills the process on a split KV cache) and decodes only its own
tail. Rows are read where the readout needs them: label logits at the last token, or hidden
states (embeddings on, pooling none) for the numpy heads. With split KV streams a sequence's
rows do not depend on what else is in the batch, so concurrent requests answer as they do alone.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import llama_cpp
import numpy as np

from llamactl.core.errors import (
    ContextLengthError,
    DecisionNotSupportedError,
    EngineClosedError,
    InvalidRequestError,
    LlamactlError,
)
from llamactl.engine._backend import memory_of
from llamactl.engine.batch import Batch
from llamactl.engine.context import ContextLayout, default_slot_ctx, open_context, physical_cores
from llamactl.engine.loop import DecodeLoop
from llamactl.engine.requests import EngineStats

from .loader import DecisionModel
from .media import MediaSet, MediaUnit
from .prompt import Task, Unit
from .readout import answers
from .request import parse_request
from .types import DecisionRequest, DecisionResult

log = logging.getLogger("llamactl.decision")


@dataclass(frozen=True)
class DecisionConfig:
    n_parallel: int = 4
    n_ctx: int | None = None  # total KV positions; None: min(train ctx, 4096) per slot
    n_batch: int = 512
    n_threads: int | None = None
    flash_attn: bool = True
    share_prefix: bool = True  # decode a block's common prefix once (off: for benchmarks)
    max_queue: int = 0  # requests waiting beyond the running ones; 0: unbounded


@dataclass
class _Job:
    request: DecisionRequest
    future: Future[DecisionResult]
    tasks: list[Task] = field(default_factory=list)
    media: MediaSet | None = None
    pending: int = 0  # tasks not finished yet
    cached: int = 0
    t_start: float = field(default_factory=time.perf_counter)
    failed: bool = False


@dataclass
class _Slot:
    seq_id: int
    job: _Job | None = None
    task: Task | None = None
    state: str = "idle"  # idle | waiting (for its parent's prefix) | prompt
    cursor: int = 0  # next unit to decode
    pos: int = 0  # next position
    stop: int = 0  # the unit index to pause at (the parent's prefix end), or the end
    children: list[_Slot] = field(default_factory=list)
    # units in the shared prefix whose rows other tasks of the block need
    shared_rows: dict[int, list[Task]] = field(default_factory=dict)
    t_admit: float = 0.0

    # A busy slot always holds its job and task (`_start_group` sets them together).
    @property
    def active_job(self) -> _Job:
        if self.job is None:
            raise RuntimeError(f"decision slot {self.seq_id} runs no job")
        return self.job

    @property
    def active_task(self) -> Task:
        if self.task is None:
            raise RuntimeError(f"decision slot {self.seq_id} runs no task")
        return self.task

    def reset(self) -> None:
        self.job = self.task = None
        self.state = "idle"
        self.cursor = self.pos = self.stop = 0
        self.children = []
        self.shared_rows = {}


class DecisionEngine(DecodeLoop["_Job"]):
    """Thread-safe front door: `submit` a request, get a future of its answers."""

    def __init__(self, dm: DecisionModel, config: DecisionConfig | None = None) -> None:
        self.dm = dm
        self.model = dm.model
        self.config = config = config or DecisionConfig()
        if config.n_parallel < 1:
            raise InvalidRequestError("n_parallel must be at least 1")
        n_ctx = config.n_ctx or default_slot_ctx(dm.model, config.n_parallel) * config.n_parallel
        self._hidden = dm.dtype.readout != "labels"
        n_batch = config.n_batch
        if not dm.dtype.causal:  # a non-causal prompt must be decoded in one ubatch
            n_batch = max(n_batch, n_ctx // config.n_parallel)
        threads = config.n_threads or physical_cores()
        # rows per token (pooling none); left unspecified when the file declares no pooling,
        # which llama.cpp resolves to none without warning about overriding its default
        declared = dm.info.get(f"{dm.info.architecture}.pooling_type") is not None
        ctx = open_context(
            dm.model,
            ContextLayout(
                n_ctx=n_ctx,
                n_batch=n_batch,
                n_ubatch=n_batch,
                n_seq_max=config.n_parallel,
                n_threads=threads,
                n_threads_batch=threads,
                kv_unified=False,  # split streams: rows independent of the batch's company
                flash_attn=config.flash_attn,
                embeddings=self._hidden,
                pooling_type=llama_cpp.LLAMA_POOLING_TYPE_NONE if declared else None,
            ),
        )
        llama_cpp.llama_set_causal_attn(ctx, dm.dtype.causal)
        self._ctx = ctx
        self._mem = memory_of(ctx)
        self.n_ctx = llama_cpp.llama_n_ctx(ctx)
        self.n_ctx_slot = llama_cpp.llama_n_ctx_seq(ctx)
        self.n_batch = llama_cpp.llama_n_batch(ctx)
        self.dm.builder.max_tokens = min(self.dm.builder.max_tokens, self.n_ctx_slot - 1)
        self._n_embd = dm.model.info.n_embd
        self._batch = Batch(self.n_batch)
        self._slots = [_Slot(i) for i in range(config.n_parallel)]
        self._groups: deque[tuple[_Job, list[Task]]] = deque()
        self.stats = EngineStats()
        self._start_loop(max_queue=config.max_queue, thread_name="llamactl-decide")

    # ================================================================ public API
    @property
    def decision_type(self) -> str:
        return self.dm.dtype.name

    @property
    def max_options(self) -> int:
        return self.dm.max_options

    def parse(self, body: Any) -> DecisionRequest:
        """Validate a `/v1/systemone` body against this model (400s as InvalidRequestError,
        input the model cannot take at all as DecisionNotSupportedError)."""
        request = parse_request(body, self.dm.dtype, self.max_options)
        self.check_media(request)
        return request

    def check_media(self, request: DecisionRequest) -> None:
        if not request.media:
            return
        kinds = {m.kind for m in request.media}
        what = "audio" if kinds == {"audio"} else "images"
        dtype, renderer = self.dm.dtype, self.dm.builder.renderer
        takes = dtype.takes_audio if what == "audio" else renderer.takes_images
        if not takes:
            raise DecisionNotSupportedError(f"this model ({dtype.name}) does not take {what}")
        proj = self.dm.projector
        if proj is None and dtype.name == "lfm2-d1-omni":
            raise DecisionNotSupportedError(
                f"this model ({dtype.name}) answers on text only here: its vision and audio "
                "towers (projector types d1omni_v / d1omni_a) do not run in the pinned "
                "llama.cpp's mtmd"
            )
        if proj is None:
            raise DecisionNotSupportedError(
                f"{what} need the model's mmproj, and none is loaded "
                f"(put mmproj-{self.dm.path.name} beside the model)"
            )
        if not all(proj.supports(k) for k in kinds):
            raise DecisionNotSupportedError(f"the loaded mmproj does not encode {what}")

    def submit(self, request: DecisionRequest) -> Future[DecisionResult]:
        """Queue a validated request; its future resolves to the answers or an error."""
        self.check_media(request)
        job = _Job(request, Future())
        self._enqueue(job, closed="the decision engine is shut down")
        return job.future

    def decide(self, request: DecisionRequest, timeout: float | None = None) -> DecisionResult:
        return self.submit(request).result(timeout)

    def tokenize(self, text: str, *, add_special: bool = True) -> list[int]:
        return self.model.tokenize(text, add_special=add_special)

    @property
    def busy_slots(self) -> int:
        return sum(1 for s in self._slots if s.state != "idle")

    def close(self) -> None:
        if not self._stop_loop():
            return
        err = EngineClosedError("the decision engine shut down before this request finished")
        running = [s.job for s in self._slots if s.job is not None]
        queued = [*self._queue, *(job for job, _ in self._groups)]
        for job in {id(j): j for j in [*running, *queued]}.values():
            self._fail(job, err)
        self._batch.free()
        llama_cpp.llama_free(self._ctx)  # once: _stop_loop admits one close, after the last step

    def __enter__(self) -> DecisionEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ============================================================ decode loop
    def _tick(self) -> None:
        self._admit()
        self._step()

    def _fail_all(self, exc: Exception) -> None:
        for job in {id(s.job): s.job for s in self._slots if s.job}.values():
            self._fail(job, exc)

    def _has_work(self) -> bool:
        return bool(self._queue or self._groups or self.busy_slots)

    # ------------------------------------------------------------ admission
    def _admit(self) -> None:
        while True:
            if not self._groups:
                with self._cv:
                    if not self._queue:
                        return
                    job = self._queue.popleft()
                self._prepare(job)
                continue
            job, tasks = self._groups[0]
            if job.failed:
                self._groups.popleft()
                continue
            free = [s for s in self._slots if s.state == "idle"]
            if len(free) < len(tasks):
                return
            self._groups.popleft()
            self._start_group(job, tasks, free)

    def _prepare(self, job: _Job) -> None:
        """Render and tokenize the job's tasks (here, on the decode thread: mtmd is not shared
        across threads), check they fit, and queue them in blocks."""
        try:
            if job.request.media:
                if self.dm.projector is None:  # refused by check_media before it was queued
                    raise DecisionNotSupportedError("media need the model's mmproj")
                job.media = MediaSet(self.dm.projector, job.request.media)
            job.tasks = self.dm.builder.build(job.request, job.media)
            for task in job.tasks:
                n = task.n_tokens
                if n >= self.n_ctx_slot:
                    raise ContextLengthError(n, self.n_ctx_slot)
                if not self.dm.dtype.causal and n > self.n_batch:
                    raise InvalidRequestError(
                        f"the prompt has {n} tokens; this model reads it in one batch of "
                        f"at most {self.n_batch}: increase the batch size"
                    )
        except Exception as exc:
            self._fail(job, exc)
            return
        job.pending = len(job.tasks)
        size = self.config.n_parallel if self._shares else 1
        for i in range(0, len(job.tasks), size):
            self._groups.append((job, job.tasks[i : i + size]))

    @property
    def _shares(self) -> bool:
        return self.config.share_prefix and self.dm.dtype.shares_prompt

    def _start_group(self, job: _Job, tasks: list[Task], free: list[_Slot]) -> None:
        now = time.perf_counter()
        slots = free[: len(tasks)]
        prefix = _common_prefix([t.units for t in tasks]) if len(tasks) > 1 else 0
        for slot, task in zip(slots, tasks, strict=True):
            slot.job, slot.task, slot.t_admit = job, task, now
            slot.cursor = slot.pos = 0
            slot.stop = len(task.units)
            slot.state = "waiting"
        parent = slots[0]
        parent.state = "prompt"
        if prefix > 0:
            parent.stop = prefix
            parent.children = slots[1:]
            for task in tasks:
                for u in task.outputs:
                    if u < prefix:
                        parent.shared_rows.setdefault(u, []).append(task)
        else:
            for slot in slots[1:]:
                slot.state = "prompt"

    # ------------------------------------------------------------ one step
    def _step(self) -> None:
        self._decode_media()
        batch = self._batch
        batch.clear()
        reads: list[tuple[int, _Slot, int]] = []  # (row, slot, unit)
        chunks: list[tuple[_Slot, int]] = []
        for slot in sorted(self._prompting(), key=lambda s: s.t_admit):
            room = batch.free_rows
            tokens = _token_run(slot.active_task.units, slot.cursor, slot.stop)
            end = slot.cursor + len(tokens)
            take = min(room, end - slot.cursor)
            if not self.dm.dtype.causal and take < end - slot.cursor:
                continue  # the whole prompt in one batch, or not yet
            if take <= 0:
                continue
            wanted = self._wanted(slot)
            for k in range(slot.cursor, slot.cursor + take):
                # with embeddings on llama.cpp outputs every row anyway: say so, quietly
                flag = k in wanted
                pos = slot.pos + k - slot.cursor
                row = batch.add(tokens[k - slot.cursor], pos, slot.seq_id, flag or self._hidden)
                if flag:
                    reads.append((row, slot, k))
            chunks.append((slot, take))
        if batch.n_tokens == 0:
            self._advance_all()
            return
        t0 = time.perf_counter()
        rc = llama_cpp.llama_decode(self._ctx, batch.raw)
        if rc != 0:
            err = LlamactlError(f"llama_decode failed (code {rc}); the request was ended")
            for job in {id(s.job): s.active_job for s, _ in chunks}.values():
                self._fail(job, err)
            return
        self.stats.decode_calls += 1
        self.stats.decode_seconds += time.perf_counter() - t0
        for row, slot, unit in reads:
            self._store(row, slot, unit)
        for slot, take in chunks:
            slot.cursor += take
            slot.pos += take
            self.stats.prompt_tokens_processed += take
        self._advance_all()

    def _prompting(self) -> list[_Slot]:
        return [s for s in self._slots if s.state == "prompt"]

    def _wanted(self, slot: _Slot) -> set[int]:
        wanted = set(slot.active_task.outputs)
        wanted.update(slot.shared_rows)
        return wanted

    def _decode_media(self) -> None:
        """Images are decoded by mtmd on their own (outside the batch), in order."""
        for slot in self._prompting():
            units, job = slot.active_task.units, slot.active_job
            while slot.cursor < slot.stop:
                unit = units[slot.cursor]
                if not isinstance(unit, MediaUnit):
                    break
                try:
                    if job.media is None:  # media units come from the job's media set
                        raise LlamactlError("a media unit outside the request's media")
                    slot.pos = job.media.decode(
                        unit, self._ctx, slot.pos, slot.seq_id, self.n_batch
                    )
                except Exception as exc:
                    self._fail(job, exc)
                    break
                slot.cursor += 1
                self.stats.prompt_tokens_processed += unit.n_tokens

    def _store(self, row: int, slot: _Slot, unit: int) -> None:
        """Keep what the readout needs from one output row."""
        if self._hidden:
            ptr = llama_cpp.llama_get_embeddings_ith(self._ctx, row)
            data = np.ctypeslib.as_array(ptr, shape=(self._n_embd,)).copy()
        else:
            ptr = llama_cpp.llama_get_logits_ith(self._ctx, row)
            logits = np.ctypeslib.as_array(ptr, shape=(self.model.n_vocab,))
        for task in slot.shared_rows.get(unit, [slot.active_task]):
            if unit in task.outputs:
                task.rows[unit] = data if self._hidden else logits[task.ids].copy()

    def _advance_all(self) -> None:
        for slot in list(self._slots):
            if slot.state != "prompt" or slot.cursor < slot.stop:
                continue
            if slot.children:
                self._fork(slot)
            elif slot.cursor >= len(slot.active_task.units):
                self._finish_task(slot)

    def _fork(self, parent: _Slot) -> None:
        """Give every child of the block a copy of the decoded prefix."""
        shared = sum(
            u.n_tokens if isinstance(u, MediaUnit) else 1
            for u in parent.active_task.units[: parent.cursor]
        )
        for child in parent.children:
            llama_cpp.llama_memory_seq_cp(self._mem, parent.seq_id, child.seq_id, -1, -1)
            child.cursor, child.pos, child.state = parent.cursor, parent.pos, "prompt"
            self.stats.prompt_tokens_cached += shared
            parent.active_job.cached += shared
        parent.children = []
        parent.shared_rows = {}
        parent.stop = len(parent.active_task.units)

    def _finish_task(self, slot: _Slot) -> None:
        job = slot.active_job
        self._free(slot)
        job.pending -= 1
        if job.pending == 0 and not job.failed:
            self._complete(job)

    def _complete(self, job: _Job) -> None:
        try:
            result = DecisionResult(
                answers(self.dm, job.request, job.tasks),
                input_tokens=sum(t.n_tokens for t in job.tasks),
                cached_tokens=job.cached,
                timings={"total_ms": (time.perf_counter() - job.t_start) * 1000.0},
            )
        except Exception as exc:
            self._fail(job, exc)
            return
        self._close_media(job)
        job.future.set_result(result)

    def _free(self, slot: _Slot) -> None:
        llama_cpp.llama_memory_seq_rm(self._mem, slot.seq_id, -1, -1)
        slot.reset()

    def _fail(self, job: _Job, exc: BaseException) -> None:
        """Any error fails the whole request: no partial answers."""
        if job.failed:
            return
        job.failed = True
        for slot in self._slots:
            if slot.job is job:
                self._free(slot)
        self._close_media(job)
        if not job.future.done():
            job.future.set_exception(exc)

    @staticmethod
    def _close_media(job: _Job) -> None:
        if job.media is not None:
            job.media.close()
            job.media = None


def _token_run(units: list[Unit], start: int, stop: int) -> list[int]:
    """The token ids from `start` up to the next media unit (or `stop`)."""
    run: list[int] = []
    for unit in units[start:stop]:
        if isinstance(unit, MediaUnit):
            break
        run.append(unit)
    return run


def _common_prefix(prompts: list[list[Any]]) -> int:
    """Units every prompt starts with; each keeps at least its last unit to itself."""
    n = min(len(p) for p in prompts) - 1
    first = prompts[0]
    i = 0
    while i < n and all(p[i] == first[i] for p in prompts[1:]):
        i += 1
    return i
