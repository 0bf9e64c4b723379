"""Values the audio engine hands to front ends: segments and the events of a stream.

Positions are seconds of audio since the stream started (the realtime API's `audio_*_ms`
are these times 1000). Items are numbered from 0 in audio order; item k ends at the k-th
commit (manual or automatic) and a cleared item is never committed.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Segment:
    """A stretch of speech and its text."""

    start: float
    end: float
    text: str


@dataclass(frozen=True)
class WindowText:
    """What a transcriber read from one window of audio (at most 30 s)."""

    text: str
    no_speech_prob: float = 0.0
    avg_logprob: float = 0.0
    tokens: int = 0


@dataclass(frozen=True)
class SpeechStarted:
    item: int
    position: float


@dataclass(frozen=True)
class SpeechStopped:
    item: int
    position: float


@dataclass(frozen=True)
class Committed:
    """Item `item` spans `start` to `position`; `auto` when turn detection committed it."""

    item: int
    position: float
    auto: bool
    start: float = 0.0


@dataclass(frozen=True)
class Partial:
    """The current hypothesis for the speech still open in `item`; replaces the previous one
    and may change. Never part of a transcript by itself."""

    item: int
    text: str


@dataclass(frozen=True)
class Tentative:
    """The speech of `item` has gone quiet and this is what it said: if the turn ends in this
    silence, `item`'s transcript will be exactly `text`, so an answer to it can be started
    while the turn is still being decided. `text == ""` withdraws it: the speaker went on.
    Sent only by streams opened with `tentative=True`, for turns the VAD ends."""

    item: int
    text: str


@dataclass(frozen=True)
class Final:
    """A finished segment of `item`; `delta` is what it adds to the item's transcript."""

    item: int
    segment: Segment
    delta: str


@dataclass(frozen=True)
class Completed:
    """Every sample of `item` up to its commit is transcribed."""

    item: int
    transcript: str
    start: float
    end: float
    segments: tuple[Segment, ...] = field(default=())

    @property
    def duration(self) -> float:
        return max(0.0, self.end - self.start)


@dataclass(frozen=True)
class Cleared:
    """The uncommitted audio of `item` was dropped; the item will never complete."""

    item: int


@dataclass(frozen=True)
class StreamFailed:
    """Transcription failed; the stream is closed."""

    message: str


StreamEvent = (
    SpeechStarted
    | SpeechStopped
    | Committed
    | Partial
    | Tentative
    | Final
    | Completed
    | Cleared
    | StreamFailed
)
