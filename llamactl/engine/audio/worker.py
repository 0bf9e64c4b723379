"""The one thread that runs speech models: every stream and batch request of a transcriber.

Why one thread: a transcriber is not thread-safe, and on a small machine two model calls at
once only slow each other down. The worker serves streams round-robin, always doing work that
finishes text (VAD, final readings, commits) before optional work (partial hypotheses), so
one chatty stream cannot starve the others.

Sharing the cores with the language model: speech runs on its own CTranslate2 threads
(`Transcriber.threads`), and the `ComputeGate` keeps it from computing while the LLM engine
decodes. Partial hypotheses simply wait while the LLM is busy; final readings wait up to
`max_defer` seconds and then run anyway, so a long answer cannot hold a transcript back
forever. On 2 cores this time-sharing keeps both at full speed, where running both at once
collapses llama.cpp's decode (its threads wait on each other).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..cores import CoreShare
from .transcriber import Transcriber

if TYPE_CHECKING:
    from .stream import TranscriptionStream

log = logging.getLogger("llamactl.audio")


class ComputeGate:
    """Answers "is the language model computing right now?" for the worker; with `cores`,
    a voice turn's urgent work runs first instead (see `llamactl.engine.cores`)."""

    def __init__(
        self,
        busy: Callable[[], bool] | None = None,
        *,
        max_defer: float = 1.0,
        cores: CoreShare | None = None,
    ) -> None:
        self._busy = busy
        self.max_defer = max_defer
        self.cores = cores

    def llm_busy(self) -> bool:
        if self._busy is None:
            return False
        try:
            return bool(self._busy())
        except Exception:  # the engine may be closing; never block speech on that
            return False

    def wait_for_idle(self) -> None:
        deadline = time.monotonic() + self.max_defer
        while self.llm_busy() and time.monotonic() < deadline:
            time.sleep(0.01)


@dataclass
class Job:
    """One unit of work planned by a stream: `compute` runs unlocked, `apply` takes the
    result (or the exception) back under the stream's lock."""

    compute: Callable[[], Any]
    apply: Callable[[Any], None]
    decode: bool = False  # uses the transcriber (subject to the gate)
    stage: str = "vad"  # what it is, for the counters: vad, turn, asr, asr_ahead, partial
    urgent: bool = False  # a voice turn waits on it: it runs before the language model


class _Batch:
    """A whole-file transcription run one segment at a time between stream work."""

    def __init__(self, segments: Iterator[Any], sink: Callable[[Any], None]) -> None:
        self.segments = segments
        self.sink = sink  # gets each segment, then None at the end, or an exception
        self.cancelled = False


class BatchHandle:
    def __init__(self, batch: _Batch, worker: AudioWorker) -> None:
        self._batch = batch
        self._worker = worker

    def cancel(self) -> None:
        self._batch.cancelled = True
        self._worker.wake()


class AudioWorker:
    def __init__(self, transcriber: Transcriber, gate: ComputeGate | None = None) -> None:
        self.transcriber = transcriber
        self.gate = gate or ComputeGate()
        self._streams: list[TranscriptionStream] = []
        self._batches: deque[_Batch] = deque()
        self._cv = threading.Condition()
        self._dirty = False
        self._closed = False
        self._rr = 0
        self.busy_seconds = 0.0  # time spent computing, for benchmarks
        self._thread = threading.Thread(target=self._run, name="llamactl-audio", daemon=True)
        self._thread.start()

    # ---------------------------------------------------------------- callers
    def add_stream(self, stream: TranscriptionStream) -> None:
        with self._cv:
            self._streams.append(stream)
            self._dirty = True
            self._cv.notify()

    def remove_stream(self, stream: TranscriptionStream) -> None:
        with self._cv:
            if stream in self._streams:
                self._streams.remove(stream)

    @property
    def n_streams(self) -> int:
        with self._cv:
            return len(self._streams)

    def submit_batch(self, segments: Iterator[Any], sink: Callable[[Any], None]) -> BatchHandle:
        batch = _Batch(segments, sink)
        with self._cv:
            self._batches.append(batch)
            self._dirty = True
            self._cv.notify()
        return BatchHandle(batch, self)

    def wake(self) -> None:
        with self._cv:
            self._dirty = True
            self._cv.notify()

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=30)

    # ----------------------------------------------------------------- thread
    def _pick(
        self, idle: bool, urgent_only: bool = False
    ) -> tuple[TranscriptionStream, Job] | None:
        with self._cv:
            streams = list(self._streams)
        n = len(streams)
        for i in range(n):
            stream = streams[(self._rr + i) % n]
            try:
                job = stream.plan(idle=idle, urgent_only=urgent_only)
            except Exception as exc:  # a bookkeeping bug fails that stream, not the worker
                log.exception("speech stream planning failed")
                stream.fail(f"internal error: {exc}")
                continue
            if job is not None:
                self._rr = (self._rr + i + 1) % max(1, n)
                return stream, job
        return None

    def _run(self) -> None:
        while True:
            with self._cv:
                if self._closed:
                    break
                self._dirty = False
            picked = self._pick(idle=False)
            if picked is not None:
                self._execute(*picked)
                continue
            if self._step_batch():
                continue
            # optional work waits while the LLM computes, but a quiet turn's reading does not
            picked = self._pick(idle=True, urgent_only=self.gate.llm_busy())
            if picked is not None:
                self._execute(*picked)
                continue
            with self._cv:
                if not self._dirty and not self._closed:
                    # re-check now and then: the gate opens without telling us
                    self._cv.wait(timeout=0.05)
        for batch in list(self._batches):
            batch.sink(RuntimeError("the speech engine was closed"))

    def _execute(self, stream: TranscriptionStream, job: Job) -> None:
        cores = self.gate.cores
        asked = time.perf_counter()
        if job.urgent:
            turn: contextlib.AbstractContextManager[None] = (
                cores.speech() if cores is not None else contextlib.nullcontext()
            )
        else:
            if job.decode:
                self.gate.wait_for_idle()
            turn = contextlib.nullcontext()
        t0 = time.perf_counter()
        try:
            with turn:
                result: Any = job.compute()
        except Exception as exc:
            log.exception("speech stream failed")
            result = exc
        finally:
            spent = time.perf_counter() - t0
            self.busy_seconds += spent
            if cores is not None:
                cores.record(job.stage, wait=t0 - asked, seconds=spent)
        try:
            job.apply(result)
        except Exception as exc:  # a bug in bookkeeping must not kill the worker
            log.exception("speech stream bookkeeping failed")
            stream.fail(f"internal error: {exc}")

    def _step_batch(self) -> bool:
        with self._cv:
            if not self._batches:
                return False
            batch = self._batches[0]
        if batch.cancelled:
            self._finish_batch(batch, None, close=True)
            return True
        self.gate.wait_for_idle()
        t0 = time.perf_counter()
        try:
            segment = next(batch.segments)
        except StopIteration:
            self._finish_batch(batch, None)
            return True
        except Exception as exc:
            self._finish_batch(batch, exc)
            return True
        finally:
            self.busy_seconds += time.perf_counter() - t0
        batch.sink(segment)
        return True

    def _finish_batch(self, batch: _Batch, outcome: Any, *, close: bool = False) -> None:
        with self._cv:
            if batch in self._batches:
                self._batches.remove(batch)
        if close:
            closer = getattr(batch.segments, "close", None)
            if closer is not None:
                closer()
        batch.sink(outcome)
