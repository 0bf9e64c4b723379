"""`AudioService`: one transcriber, its worker thread, and the streams and batches using it.

Front ends (the server, the CLI, benchmarks) hold one service; it loads the model on first
use, so a server that never hears audio never pays for it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..cores import CoreShare
from .load import load_transcriber
from .stream import TranscriptionStream
from .transcriber import Transcriber
from .types import Segment, StreamEvent
from .worker import AudioWorker, BatchHandle, ComputeGate


class AudioService:
    def __init__(
        self,
        model: str | Path | None = None,
        *,
        mmproj: str | Path | None = None,
        threads: int = 0,
        llm_busy: Callable[[], bool] | None = None,
        transcriber: Transcriber | None = None,
        cores: CoreShare | None = None,
    ) -> None:
        self._model = model
        self._mmproj = mmproj
        self._threads = threads
        self._gate = ComputeGate(llm_busy, cores=cores)
        self._transcriber = transcriber
        self._worker: AudioWorker | None = None
        self._lock = threading.Lock()
        self._closed = False

    @property
    def loaded(self) -> bool:
        return self._worker is not None

    def worker(self) -> AudioWorker:
        """The worker, loading the model first if needed (blocking: call off the loop)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the speech engine is closed")
            if self._worker is None:
                if self._transcriber is None:
                    self._transcriber = load_transcriber(
                        self._model, mmproj=self._mmproj, threads=self._threads
                    )
                self._worker = AudioWorker(self._transcriber, self._gate)
            return self._worker

    @property
    def transcriber(self) -> Transcriber:
        return self.worker().transcriber

    @property
    def live_streams(self) -> int:
        return 0 if self._worker is None else self._worker.n_streams

    def open_stream(
        self, *, sink: Callable[[StreamEvent], None] | None = None, **options: Any
    ) -> TranscriptionStream:
        return TranscriptionStream(self.worker(), sink=sink, **options)

    def submit(
        self,
        pcm: np.ndarray | bytes,
        rate: int,
        sink: Callable[[Any], None],
        *,
        language: str | None = None,
        prompt: str | None = None,
    ) -> BatchHandle:
        """Transcribe a recording on the worker; `sink` gets each Segment, then None (done)
        or an exception."""
        worker = self.worker()
        transcriber = worker.transcriber
        language = transcriber.check_language(language)
        segments = transcriber.iter_transcribe(pcm, rate, language=language, prompt=prompt)
        return worker.submit_batch(segments, sink)

    def transcribe(
        self, pcm: np.ndarray | bytes, rate: int, *, language: str | None = None
    ) -> Iterator[Segment]:
        """Blocking iterator over the segments of a recording."""
        import queue

        out: queue.SimpleQueue[Any] = queue.SimpleQueue()
        handle = self.submit(pcm, rate, out.put, language=language)
        try:
            while True:
                item = out.get()
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            handle.cancel()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            worker, self._worker = self._worker, None
        if worker is not None:
            worker.close()
            worker.transcriber.close()
