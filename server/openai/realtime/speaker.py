"""Speaking a response while it is written: text in, PCM16 deltas out, sentence by sentence.

The answer's text is cut into sentences as it arrives; each sentence is synthesized (eSpeak NG
through the app's `Synthesizer`) on a worker thread as soon as it is complete, resampled to
the session's output rate and sent in short deltas, so the first audio goes out when the first
sentence is written, not when the answer ends. The speaker also remembers which stretch of
the transcript each stretch of audio speaks, so an interrupted answer can be cut back to what
the listener actually heard.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from starlette.concurrency import run_in_threadpool

from llamactl import Synthesizer, as_float32, resample

DELTA_SECONDS = 0.2  # audio per response.output_audio.delta
_SENTENCE_END = re.compile(r"[.!?]+[\"')\]]*\s|\n")
_CLAUSE_END = re.compile(r"[,;:]\s")
_CLAUSE_MIN = 80  # cut at a comma once a sentence is this long
_FIRST_CLAUSE_MIN = 16  # ... and sooner in the first piece: the first sound comes earlier
_HARD_MAX = 240  # cut at a space when nothing else comes
_FIRST_HARD_MAX = 60
_UNSPOKEN = re.compile(r"[*_#`~|<>\[\]{}]+")


class SentenceSplitter:
    """Cuts streamed text into speakable pieces; `pos` counts the characters handed out."""

    def __init__(self) -> None:
        self._buf = ""
        self.pos = 0

    def feed(self, text: str) -> list[tuple[str, int, int]]:
        """Complete pieces as (text, start, end) offsets into everything fed so far."""
        self._buf += text
        out: list[tuple[str, int, int]] = []
        while True:
            cut = self._cut()
            if cut is None:
                return out
            out.append(self._take(cut))

    def flush(self) -> list[tuple[str, int, int]]:
        return [self._take(len(self._buf))] if self._buf else []

    def _cut(self) -> int | None:
        m = _SENTENCE_END.search(self._buf)
        if m:
            return m.end()
        first = self.pos == 0
        if len(self._buf) >= (_FIRST_CLAUSE_MIN if first else _CLAUSE_MIN):
            ends = [m.end() for m in _CLAUSE_END.finditer(self._buf)]
            ends = [e for e in ends if not first or e >= _FIRST_CLAUSE_MIN]
            if ends:
                return ends[-1]
        if len(self._buf) >= (_FIRST_HARD_MAX if first else _HARD_MAX):
            space = self._buf.rfind(" ")
            return space + 1 if space > 0 else len(self._buf)
        return None

    def _take(self, n: int) -> tuple[str, int, int]:
        piece, self._buf = self._buf[:n], self._buf[n:]
        start = self.pos
        self.pos += len(piece)
        return piece, start, self.pos


def speakable(text: str) -> str:
    """Drop markup that eSpeak would read out loud (asterisks, hashes, backticks)."""
    return " ".join(_UNSPOKEN.sub(" ", text).split())


@dataclass
class Span:
    """Transcript characters [start, end) are spoken by output samples [a0, a1)."""

    start: int
    end: int
    a0: int
    a1: int


class Speaker:
    """One response's voice. `feed` text, then `finish()`; `cancel()` stops at once."""

    def __init__(
        self,
        synth: Synthesizer,
        *,
        voice: str | None,
        speed: float,
        rate: int,
        send: Callable[[bytes], None],
        urgent: Callable[[], contextlib.AbstractContextManager[None]] | None = None,
    ) -> None:
        self._synth = synth
        # held while the first piece is synthesized: the listener is waiting for it, so the
        # decode loop pauses meanwhile (CoreShare.speech); later pieces have the playback's
        # slack and share the cores as they come
        self._urgent = urgent
        self._voice = voice
        self._speed = speed
        self.rate = rate
        self._send = send
        self._split = SentenceSplitter()
        self._queue: asyncio.Queue[tuple[str, int, int] | None] = asyncio.Queue()
        self._cancelled = False
        self.samples = 0  # output samples sent so far
        self.spans: list[Span] = []
        self.error: BaseException | None = None
        self._task = asyncio.create_task(self._run())

    def feed(self, text: str) -> None:
        for piece in self._split.feed(text):
            self._queue.put_nowait(piece)

    async def finish(self) -> None:
        """Speak what is left and wait until every delta is sent."""
        for piece in self._split.flush():
            self._queue.put_nowait(piece)
        self._queue.put_nowait(None)
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def cancel(self) -> None:
        self._cancelled = True
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._task

    @property
    def seconds(self) -> float:
        return self.samples / self.rate

    async def _run(self) -> None:
        try:
            while (piece := await self._queue.get()) is not None:
                text, start, end = piece
                words = speakable(text)
                if not words:
                    continue
                audio = await run_in_threadpool(self._render, words, not self.spans)
                if self._cancelled:
                    return
                a0 = self.samples
                step = max(1, int(self.rate * DELTA_SECONDS))
                for i in range(0, audio.size, step):
                    chunk = audio[i : i + step]
                    self.samples += chunk.size
                    self._send(chunk.astype("<i2").tobytes())
                self.spans.append(Span(start, end, a0, self.samples))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # reported by the response; text output goes on
            self.error = exc

    def _render(self, text: str, first: bool = False) -> np.ndarray:
        turn = self._urgent() if first and self._urgent is not None else contextlib.nullcontext()
        with turn:
            chunks = self._synth.synthesize(text, voice=self._voice, speed=self._speed)
            try:
                parts = [as_float32(c) for c in chunks if not self._cancelled]
            finally:
                close = getattr(chunks, "close", None)
                if close is not None:
                    close()
        if not parts:
            return np.zeros(0, np.int16)
        audio = resample(np.concatenate(parts), self._synth.sample_rate, self.rate)
        return (np.clip(audio, -1.0, 1.0) * 32767.0).round().astype(np.int16)

    def heard_text(self, transcript: str, audio_end_ms: int) -> str:
        """The transcript as far as the audio up to `audio_end_ms` speaks it: whole pieces,
        then the heard share of the piece being spoken, cut at a word boundary."""
        end = int(audio_end_ms * self.rate / 1000)
        cut = 0
        for span in self.spans:
            if end >= span.a1:
                cut = span.end
                continue
            if end > span.a0:
                share = (end - span.a0) / max(1, span.a1 - span.a0)
                upto = span.start + int((span.end - span.start) * share)
                space = transcript.rfind(" ", span.start, upto + 1)
                cut = space if space > span.start else span.start
            break
        return transcript[:cut].rstrip()
