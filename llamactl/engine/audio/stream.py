"""`TranscriptionStream`: live audio in, partial hypotheses, final segments and commits out.

Positions are sample counts at 16 kHz since the stream started (the VAD's rate; audio is
resampled on arrival, and again to the model's rate when a window is read).

The commit rule (spec section 1.6): `commit()` records the position of the end of the audio
appended so far in a FIFO. The worker runs the VAD in position order; when it reaches a
commit, the speech region open at that point is cut there, and the item completes exactly
when every region before the commit has its final reading. Completion never depends on the
buffer running dry, so audio appended after a commit, even while the tail of the item is
still being read, belongs to the next item, and back-to-back commits are separate items.

Work done ahead keeps commits fast: while someone speaks, the open region is read every
`partial_interval` seconds (a `Partial` hypothesis); once the VAD hears silence, the region is
read up to its padded end. When the region is then closed (by silence or a commit) and only
silence separates the two ends, that reading is the final one and costs nothing more.

Semantic turn detection (`semantic`, a `SemanticTurn`): when the speech of a turn goes
quiet, Smart Turn reads the turn's audio (its last 8 s) after the level's short silence; a
turn judged finished is committed there, one judged unfinished waits longer (bounded, see
`semantic.py`), and speech resuming keeps it open, as one region. The VAD waits for each
reading before it applies the next window, so where a turn ends depends on the audio only,
never on how fast it arrived or was read.

Events go to `sink` (called under the stream's lock, so it must not block: hand them to a
queue or an event loop), or to an internal queue read with `next_event`.
"""

from __future__ import annotations

import enum
import queue
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from llamactl.core.errors import (
    BufferFullError,
    StreamClosedError,
)

from .pcm import StreamResampler, check_rate, resample, to_float32
from .semantic import SemanticTurn
from .transcriber import join_text
from .turn import RATE as TURN_RATE
from .turn import WINDOW_S as TURN_WINDOW_S
from .turn import SmartTurn
from .types import (
    Cleared,
    Committed,
    Completed,
    Final,
    Partial,
    Segment,
    SpeechStarted,
    SpeechStopped,
    StreamEvent,
    StreamFailed,
    Tentative,
    WindowText,
)
from .vad import VAD_RATE, WINDOW, SileroStream, VadConfig
from .worker import AudioWorker, Job

_TURN_N = TURN_RATE * TURN_WINDOW_S  # the samples Smart Turn reads

MAX_VAD_WINDOWS = 64  # 2 s of audio per VAD job, so one stream never hogs the worker
MIN_READ_S = 0.3


class _Keep(enum.Enum):
    KEEP = 0  # configure(): leave the setting as it is


@dataclass(eq=False)
class _Region:
    """Speech inside one item, from `start` to `end` (None while open)."""

    item: int
    start: int
    end: int | None = None
    quiet_from: int | None = None  # first silent window since the last speech
    read_end: int = -1  # audio end of the last reading done ahead
    read_text: str = ""
    partial_at: int = 0
    dead: bool = False
    # semantic turns: the quiet stretch Smart Turn read, and its P(finished) (None: not yet)
    turn_quiet: int | None = None
    turn_p: float | None = None
    tentative: bool = False  # a Tentative with this region's quiet reading is out

    def reusable(self, end_padding: int) -> bool:
        """Does the reading done ahead cover the closed region's speech and its end padding?

        A partial reading that stops just after the last word is not enough: Whisper reads a
        word cut at its very end differently, so reusing it would make the transcript depend
        on when that partial happened to be taken.
        """
        if self.read_end < 0 or self.end is None:
            return False
        if self.read_end == self.end:
            return True
        q = self.quiet_from
        return q is not None and self.end >= q and self.read_end >= min(self.end, q + end_padding)


@dataclass
class _Mark:
    pos: int
    kind: str  # "manual" | "clear"


class TranscriptionStream:
    def __init__(
        self,
        worker: AudioWorker,
        *,
        language: str | None = None,
        prompt: str | None = None,
        vad: VadConfig | None = None,
        turn_detection: bool = False,
        semantic: SemanticTurn | None = None,
        partials: bool = True,
        partial_interval: float = 0.8,
        tentative: bool = False,
        input_rate: int = 16000,
        sink: Callable[[StreamEvent], None] | None = None,
        max_buffered_seconds: float | None = None,
    ) -> None:
        self._worker = worker
        self._transcriber = worker.transcriber
        self.language = self._transcriber.check_language(language)
        self.prompt = prompt
        self.vad = vad or VadConfig()
        self.turn_detection = turn_detection
        self.semantic = semantic
        self._smart_turn = SmartTurn() if semantic is not None else None
        self.partials = partials
        self.tentative = tentative
        self.partial_interval = partial_interval
        self.input_rate = check_rate(input_rate)
        self._sink = sink
        self.max_buffered_seconds = max_buffered_seconds
        self._queue: queue.SimpleQueue[StreamEvent] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        # audio at 16 kHz: self._buf[i] is sample self._base + i; self._n samples so far
        self._buf = np.zeros(VAD_RATE * 8, dtype=np.float32)
        self._base = 0
        self._n = 0
        self._resampler: StreamResampler | None = None
        self._silero = SileroStream()
        self._vad_pos = 0
        self._marks: deque[_Mark] = deque()
        self._vad_item = 0
        self._starts: dict[int, int] = {0: 0}
        self._region: _Region | None = None
        self._last_end = 0
        self._ready: deque[_Region] = deque()
        self._done: deque[tuple[int, int]] = deque()  # (item, commit position)
        self._segments: dict[int, list[Segment]] = {}
        self._closed = False
        self._failed: str | None = None
        # semantic turns: the (region, window end) the VAD waits at for a Smart Turn reading,
        # whether that reading is under way, and the VAD results held back meanwhile
        self._turn_wait: tuple[_Region, int] | None = None
        self._turn_asked = False
        self._held_probs: tuple[int, np.ndarray] | None = None
        worker.add_stream(self)

    # ------------------------------------------------------------ callers
    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def position(self) -> float:
        """Seconds of audio appended so far."""
        return self._n / VAD_RATE

    def configure(
        self,
        *,
        vad: VadConfig | None = None,
        turn_detection: bool | None = None,
        semantic: SemanticTurn | None | _Keep = _Keep.KEEP,
        language: str | None = None,
        prompt: str | None = None,
    ) -> None:
        """Change a live stream: VAD from the next window, language and prompt from the next
        reading. `language=""` / `prompt=""` reset them; `semantic=None` turns semantic turn
        detection off (ModelNotFoundError, changing nothing, if Smart Turn is missing)."""
        checked = self._transcriber.check_language(language) if language is not None else None
        smart = None
        if isinstance(semantic, SemanticTurn):
            smart = self._smart_turn or SmartTurn()
        with self._lock:
            if not isinstance(semantic, _Keep):
                self.semantic = semantic
                if smart is not None:
                    self._smart_turn = smart
            if vad is not None:
                self.vad = vad
            if turn_detection is not None:
                self.turn_detection = turn_detection
            if language is not None:
                self.language = checked
            if prompt is not None:
                self.prompt = prompt or None

    def append(self, pcm: bytes | np.ndarray, rate: int | None = None) -> None:
        """Add audio: PCM16 LE bytes, or an int16/float32 array, at `rate` Hz."""
        rate = check_rate(rate) if rate is not None else self.input_rate
        samples = to_float32(pcm)
        with self._lock:
            self._check_open()
            self._check_room(samples.size * VAD_RATE / rate)
            if self._resampler is None or self._resampler.src != rate:
                if self._resampler is not None:
                    self._write(self._resampler.flush())
                self._resampler = StreamResampler(rate, VAD_RATE)
            self._write(self._resampler.push(samples))
        self._worker.wake()

    def commit(self) -> float:
        """End the current item at the end of the audio appended so far; returns that
        position in seconds. The item's `Committed` and `Completed` events follow."""
        return self._mark("manual")

    def clear(self) -> float:
        """Drop the audio appended since the last commit (a `Cleared` event follows)."""
        return self._mark("clear")

    def _mark(self, kind: str) -> float:
        with self._lock:
            self._check_open()
            if self._resampler is not None:
                self._write(self._resampler.flush())
            self._marks.append(_Mark(self._n, kind))
            pos = self._n
        self._worker.wake()
        return pos / VAD_RATE

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until every commit so far has completed (or the stream closed)."""
        with self._idle:
            return self._idle.wait_for(
                lambda: self._closed or not (self._marks or self._done), timeout=timeout
            )

    def next_event(self, timeout: float | None = None) -> StreamEvent | None:
        """The next event when no sink was given; None on timeout."""
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            return None

    def close(self) -> None:
        """Stop now and free the audio; pending work is dropped."""
        with self._lock:
            self._closed = True
            self._release()
            self._idle.notify_all()
        self._worker.remove_stream(self)

    def fail(self, message: str) -> None:
        with self._lock:
            if self._closed:
                return
            self._failed = message
            self._emit(StreamFailed(message))
            self._closed = True
            self._release()
            self._idle.notify_all()
        self._worker.remove_stream(self)

    def __enter__(self) -> TranscriptionStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------- internals
    def _check_open(self) -> None:
        if self._closed:
            raise StreamClosedError(self._failed or "the transcription stream is closed")

    def _check_room(self, incoming: float) -> None:
        """Refuse audio that would make the stream hold more than `max_buffered_seconds` not
        yet read: a client sending faster than it is transcribed would grow it without end."""
        limit = self.max_buffered_seconds
        if limit is None:
            return
        held = self._n - max(self._base, self._keep_from())
        if held + incoming > limit * VAD_RATE:
            raise BufferFullError(
                f"the input audio buffer is full: {held / VAD_RATE:.0f} s are waiting to be "
                f"transcribed and this append adds {incoming / VAD_RATE:.0f} s, over the "
                f"{limit:g} s a session may hold (realtime_max_buffer_seconds); send audio "
                "no faster than it is transcribed"
            )

    def _release(self) -> None:
        self._buf = np.zeros(0, dtype=np.float32)
        self._base = self._n
        self._ready.clear()
        self._marks.clear()
        self._done.clear()
        self._segments.clear()
        self._turn_wait = None
        self._held_probs = None
        if self._region is not None:
            self._region.dead = True
        self._region = None

    def _emit(self, event: StreamEvent) -> None:
        if self._sink is not None:
            self._sink(event)
        else:
            self._queue.put(event)

    def _keep_from(self) -> int:
        """The oldest sample still needed: a region starting at the next speech window
        reaches back by the prefix padding."""
        lookback = self.vad.samples(self.vad.prefix_padding_ms) + WINDOW
        if self.semantic is not None:  # Smart Turn reads the turn's last 8 s
            item_start = self._starts.get(self._vad_item, self._vad_pos)
            lookback = max(lookback, self._vad_pos - max(item_start, self._vad_pos - _TURN_N))
        starts = [self._vad_pos - lookback] + [r.start for r in self._ready]
        if self._region is not None:
            starts.append(self._region.start)
        return min(starts)

    def _write(self, samples: np.ndarray) -> None:
        if samples.size == 0:
            return
        used = self._n - self._base
        if used + samples.size > self._buf.size:
            keep = max(self._base, self._keep_from())
            live = self._buf[keep - self._base : used]
            size = max(self._buf.size, 2 * (live.size + samples.size))
            grown = np.empty(size, dtype=np.float32)
            grown[: live.size] = live
            self._buf, self._base = grown, keep
            used = self._n - self._base
        self._buf[used : used + samples.size] = samples
        self._n += samples.size

    def _audio(self, start: int, end: int) -> np.ndarray:
        if start < self._base or end > self._n:
            raise RuntimeError(f"audio {start}:{end} is outside the buffer {self._base}:{self._n}")
        return self._buf[start - self._base : end - self._base].copy()

    def _seconds(self, pos: int) -> float:
        return round(pos / VAD_RATE, 3)

    # ------------------------------------------------------- worker side
    def plan(self, *, idle: bool, urgent_only: bool = False) -> Job | None:
        """The next unit of work (called by the worker thread only); `urgent_only` (idle
        work while the language model computes): only what a voice turn waits on."""
        with self._lock:
            if self._closed:
                return None
            if idle:
                return self._plan_ahead(urgent_only)
            self._settle()
            job = self._plan_turn() or self._plan_vad() or self._plan_final()
            self._settle()  # regions finalized from readings done ahead may finish items
            self._idle.notify_all()
            return job

    def _plan_turn(self) -> Job | None:
        """The Smart Turn reading the VAD waits for."""
        wait = self._turn_wait
        if wait is None or self._turn_asked or self._smart_turn is None:
            return None
        region, end_w = wait
        start = max(self._starts.get(region.item, region.start), self._base, end_w - _TURN_N)
        audio = self._audio(start, end_w)
        smart = self._smart_turn
        self._turn_asked = True
        return Job(
            compute=lambda: smart.probability(audio),
            apply=lambda p: self._locked(self._apply_turn, region, end_w, p),
            stage="turn",
            urgent=True,
        )

    def _plan_vad(self) -> Job | None:
        if self._held_probs is not None:  # resume after a Smart Turn reading
            if self._turn_wait is not None:
                return None
            start, probs = self._held_probs
            self._held_probs = None
            self._apply_vad(start, probs)
            self._settle()
            if self._held_probs is not None:
                return None
        n = (self._n - self._vad_pos) // WINDOW
        if self._marks:
            n = min(n, max(0, (self._marks[0].pos - self._vad_pos) // WINDOW))
        n = min(n, MAX_VAD_WINDOWS)
        if n <= 0:
            return None
        start = self._vad_pos
        audio = self._audio(start, start + n * WINDOW)
        return Job(
            compute=lambda: self._silero.probs(audio),
            apply=lambda probs: self._locked(self._apply_vad, start, probs),
        )

    def _plan_final(self) -> Job | None:
        while self._ready and self._ready[0].reusable(self._end_padding()):
            region = self._ready[0]
            self._finalize(region, region.read_text)
        if not self._ready:
            return None
        region = self._ready[0]
        assert region.end is not None
        audio = self._audio(region.start, region.end)
        return Job(
            compute=lambda: self._read(audio),
            apply=lambda reading: self._locked(self._apply_final, region, reading),
            decode=True,
            stage="asr",
            urgent=self.turn_detection,
        )

    def _plan_ahead(self, urgent_only: bool = False) -> Job | None:
        """A partial hypothesis, or the reading of a region that has gone quiet (urgent when
        the VAD ends turns: the turn's transcript, and an answer started early, wait on it)."""
        region = self._region
        if region is None or self._marks:
            return None
        quiet = region.quiet_from is not None and self.turn_detection
        if urgent_only and not quiet:
            return None
        pad = self._end_padding()
        if region.quiet_from is not None:
            end = region.quiet_from + pad
            if self._vad_pos < end or region.read_end == end:
                return None
        else:
            end = self._vad_pos
            if not self.partials or end - region.partial_at < self.partial_interval * VAD_RATE:
                return None
        if end - region.start < MIN_READ_S * VAD_RATE:
            return None
        region.partial_at = end
        audio = self._audio(region.start, end)
        return Job(
            compute=lambda: self._read(audio),
            apply=lambda reading: self._locked(self._apply_ahead, region, end, reading),
            decode=True,
            stage="asr_ahead" if region.quiet_from is not None else "partial",
            urgent=quiet,
        )

    def _locked(self, fn: Callable[..., None], *args: object) -> None:
        result = args[-1]
        if isinstance(result, BaseException):
            self.fail(f"transcription failed: {result}")
            return
        with self._lock:
            if self._closed:
                return
            fn(*args)
            self._settle()
            self._idle.notify_all()
        self._worker.wake()

    def _read(self, audio16: np.ndarray) -> WindowText:
        audio = resample(audio16, VAD_RATE, self._transcriber.sample_rate)
        return self._transcriber.transcribe_window(
            audio, language=self.language, prompt=self.prompt
        )

    # ------------------------------------------------- applying results
    def _apply_vad(self, start: int, probs: np.ndarray) -> None:
        for i, p in enumerate(probs):
            w = start + i * WINDOW
            if not self._window(w, float(p)):  # waits for Smart Turn: hold the rest
                self._held_probs = (w, probs[i:])
                self._vad_pos = w
                return
        self._vad_pos = start + len(probs) * WINDOW

    def _apply_turn(self, region: _Region, end_w: int, p: float) -> None:
        self._turn_wait = None
        self._turn_asked = False
        if not region.dead:
            region.turn_p = p

    def _window(self, w: int, p: float) -> bool:
        """Apply one VAD window; False if it needs a Smart Turn reading first (the window is
        then applied again once the reading is in: nothing it did so far changes that)."""
        cfg = self.vad
        end_w = w + WINDOW
        region = self._region
        if region is None:
            if p >= cfg.threshold:
                begin = max(
                    self._starts[self._vad_item],
                    self._last_end,
                    self._base,
                    w - cfg.samples(cfg.prefix_padding_ms),
                )
                self._region = _Region(self._vad_item, begin, partial_at=begin)
                self._emit(SpeechStarted(self._vad_item, self._seconds(begin)))
            return True
        semantic = self.semantic if self.turn_detection else None
        if p >= cfg.threshold:
            region.quiet_from = None
            if region.tentative:
                region.tentative = False
                self._emit(Tentative(region.item, ""))
        elif p < cfg.neg_threshold:
            if region.quiet_from is None:
                region.quiet_from = w
            if semantic is not None:
                ends = self._semantic_end(region, end_w, semantic)
                if ends is None:
                    return False
            else:
                ends = end_w - region.quiet_from >= cfg.samples(cfg.silence_duration_ms)
            if ends:
                end = min(end_w, region.quiet_from + self._end_padding())
                self._close_region(region, end)
                self._region = None
                self._emit(SpeechStopped(self._vad_item, self._seconds(end_w)))
                if self.turn_detection:
                    self._commit_at(end_w, auto=True)
                return True
        if end_w - region.start >= cfg.max_speech_s * VAD_RATE:
            q = region.quiet_from
            cut = q if q is not None and q - region.start > VAD_RATE else end_w
            self._close_region(region, cut)
            self._region = _Region(self._vad_item, cut, partial_at=cut)
        return True

    def _end_padding(self) -> int:
        """Audio kept after a region's last speech window. A semantic turn keeps half its
        short silence: the region is read while the VAD still waits for the rest of that
        silence and Smart Turn's reading, so the transcript is ready as the turn ends (with
        the full 200 ms the reading only began then, 130 ms later than it can)."""
        ms = self.vad.end_padding_ms
        if self.semantic is not None and self.turn_detection:
            ms = min(ms, self.semantic.finished_ms // 2)
        return self.vad.samples(ms)

    def _semantic_end(self, region: _Region, end_w: int, rule: SemanticTurn) -> bool | None:
        """Does the silence up to `end_w` end the turn? None: Smart Turn must read it first."""
        quiet = region.quiet_from
        assert quiet is not None
        if region.turn_quiet != quiet:  # a new quiet stretch: a reading of its own
            region.turn_quiet = quiet
            region.turn_p = None
        silence = end_w - quiet
        if silence >= self.vad.samples(rule.max_ms):
            return True
        if silence < self.vad.samples(rule.finished_ms):
            return False
        if region.turn_p is None:
            self._turn_wait = (region, end_w)
            return None
        return silence >= self.vad.samples(rule.silence_ms(region.turn_p))

    def _close_region(self, region: _Region, end: int) -> None:
        region.end = max(region.start, end)
        self._last_end = region.end
        self._ready.append(region)

    def _commit_at(self, pos: int, *, auto: bool) -> None:
        """Item `_vad_item` ends at `pos`; the VAD has read every window before it."""
        item = self._vad_item
        region = self._region
        if region is not None:
            q = region.quiet_from
            end = pos if q is None else min(pos, q + self._end_padding())
            self._close_region(region, end)
            self._region = None
        self._done.append((item, pos))
        start = self._starts.get(item, pos)
        self._emit(Committed(item, self._seconds(pos), auto, self._seconds(start)))
        self._next_item(pos, continuing=region is not None and region.quiet_from is None)

    def _clear_at(self, pos: int) -> None:
        item = self._vad_item
        for ready in list(self._ready):
            if ready.item == item:
                ready.dead = True
                self._ready.remove(ready)
        region = self._region
        if region is not None:
            region.dead = True
            self._region = None
        self._segments.pop(item, None)
        self._starts.pop(item, None)
        self._emit(Cleared(item))
        self._next_item(pos, continuing=region is not None and region.quiet_from is None)

    def _next_item(self, pos: int, *, continuing: bool) -> None:
        self._vad_item += 1
        self._starts[self._vad_item] = pos
        self._last_end = pos
        if continuing:  # speech goes on across the boundary: it starts the next item
            self._region = _Region(self._vad_item, pos, partial_at=pos)
            self._emit(SpeechStarted(self._vad_item, self._seconds(pos)))

    def _settle(self) -> None:
        """Reach the commits the VAD has caught up with, and complete finished items."""
        while self._marks and self._marks[0].pos < self._vad_pos + WINDOW:
            mark = self._marks.popleft()
            if mark.kind == "clear":
                self._clear_at(mark.pos)
            else:
                self._commit_at(mark.pos, auto=False)
        while self._done:
            item, pos = self._done[0]
            if self._ready and self._ready[0].item <= item:
                return
            self._done.popleft()
            segments = tuple(self._segments.pop(item, ()))
            start = self._starts.pop(item, pos)
            self._emit(
                Completed(
                    item,
                    join_text([s.text for s in segments]),
                    self._seconds(start),
                    self._seconds(pos),
                    segments,
                )
            )

    def _apply_final(self, region: _Region, reading: WindowText) -> None:
        if region.dead or not self._ready or self._ready[0] is not region:
            return
        self._finalize(region, reading.text)

    def _finalize(self, region: _Region, text: str) -> None:
        self._ready.popleft()
        text = text.strip()
        if not text or region.end is None:
            return
        segments = self._segments.setdefault(region.item, [])
        segment = Segment(self._seconds(region.start), self._seconds(region.end), text)
        delta = text if not segments else " " + text
        segments.append(segment)
        self._emit(Final(region.item, segment, delta))

    def _apply_ahead(self, region: _Region, end: int, reading: WindowText) -> None:
        if region.dead:
            return
        region.read_end = end
        region.read_text = reading.text
        if self.partials and region is self._region and reading.text.strip():
            self._emit(Partial(region.item, reading.text.strip()))
        if self._tentative_ready(region, end) and reading.text.strip():
            region.tentative = True
            self._emit(Tentative(region.item, reading.text.strip()))

    def _tentative_ready(self, region: _Region, end: int) -> bool:
        """Is this reading what the item's transcript will be if the turn ends in this
        silence? It must cover the padded end of the quiet region that is still open, and
        be the item's only segment."""
        return (
            self.tentative
            and self.turn_detection
            and region is self._region
            and region.quiet_from is not None
            and end == region.quiet_from + self._end_padding()
            and not self._segments.get(region.item)
            and not any(r.item == region.item for r in self._ready)
        )
