"""How a voice turn's speech work and the language model share the cores, by plan.

On two cores, speech models (Whisper's CTranslate2 threads, Smart Turn's ONNX Runtime) and
llama.cpp's decode running at once slow each other several-fold: their threads wait on each
other. So they take turns, and who goes first depends on who is waiting:

- Work a voice turn waits on (the reading of a turn that has gone quiet, its final reading,
  Smart Turn's verdict) goes first: it runs inside `speech()`, and the decode loop pauses
  between two steps while it computes (`pause_for_speech`, at most `max_pause` seconds). A
  chat stream loses that time, about a tenth of a second a turn; the turn does not wait
  behind every other stream's tokens.
- Work nobody waits on (partial hypotheses, whole-file transcription) yields to the decode
  instead (the audio worker's `ComputeGate`).

Every stage's wait for the cores and its compute time are counted here (`record`), and the
server shows them in /metrics.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["CoreShare", "StageTotals"]


@dataclass
class StageTotals:
    """One stage's counters: how many times it ran, its summed waits and compute times."""

    count: int = 0
    wait_seconds: float = 0.0
    seconds: float = 0.0


class CoreShare:
    """The speech-first turn-taking on the cores, and each stage's counters."""

    def __init__(self, *, max_pause: float = 1.0) -> None:
        self.max_pause = max_pause  # a decode step never waits longer than this for speech
        self._cv = threading.Condition()
        self._speech = 0
        self._stages: dict[str, StageTotals] = {}
        self.llm_paused_seconds = 0.0  # decode time given to speech

    @contextlib.contextmanager
    def speech(self) -> Iterator[None]:
        """Held while a voice turn's speech work computes: decoding pauses meanwhile."""
        with self._cv:
            self._speech += 1
        try:
            yield
        finally:
            with self._cv:
                self._speech -= 1
                self._cv.notify_all()

    @property
    def speech_running(self) -> bool:
        with self._cv:
            return self._speech > 0

    def pause_for_speech(self) -> None:
        """Called by the decode loop between steps: wait while speech work computes."""
        with self._cv:
            if not self._speech:
                return
            t0 = time.monotonic()
            self._cv.wait_for(lambda: not self._speech, timeout=self.max_pause)
            self.llm_paused_seconds += time.monotonic() - t0

    def record(self, stage: str, *, wait: float, seconds: float) -> None:
        with self._cv:
            totals = self._stages.setdefault(stage, StageTotals())
            totals.count += 1
            totals.wait_seconds += wait
            totals.seconds += seconds

    def stages(self) -> dict[str, StageTotals]:
        """A copy of every stage's counters, by stage name."""
        with self._cv:
            return {
                k: StageTotals(v.count, v.wait_seconds, v.seconds) for k, v in self._stages.items()
            }
