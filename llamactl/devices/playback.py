"""Sound output with sounddevice (PortAudio): the one place llamactl opens a speaker.

`output_stream` opens a started int16 mono `RawOutputStream` (anything with its signature can
stand in: tests play into a list) and turns every failure into one `PlaybackUnavailable` line.
`llamactl tts --play` writes chunks to it as they are spoken; the TUI's `Player` feeds it from
a callback, so queued audio can be dropped at once (barge-in) and the heard part reported.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from llamactl.core.errors import AudioDeviceError, PlaybackUnavailable

from .capture import sounddevice_module

RATE = 24000  # the Realtime API's PCM16 rate, which the TUI plays
StreamFactory = Callable[..., Any]


def output_stream(rate: int, *, factory: StreamFactory | None = None, **options: Any) -> Any:
    """A started mono int16 output stream at `rate` (`options`: sounddevice's, e.g. a callback).

    A missing PortAudio or a device that does not open raises `PlaybackUnavailable`."""
    if factory is None:
        try:
            factory = sounddevice_module().RawOutputStream
        except AudioDeviceError as exc:
            message = str(exc).replace("microphone input needs", "sound output needs")
            raise PlaybackUnavailable(message) from None
    try:
        stream = factory(samplerate=rate, channels=1, dtype="int16", **options)
        stream.start()
    except Exception as exc:  # PortAudioError: no output device
        raise PlaybackUnavailable(f"cannot play audio: {exc}; is there an output device?") from None
    return stream


class Player:
    """Plays PCM16 chunks as they arrive. This base plays nothing and just counts: it is
    what runs when no output device exists (answers are then read, not heard)."""

    available = False
    rate = RATE

    def __init__(self) -> None:
        # told every block handed to the device, silence included, as it goes (PCM16 bytes):
        # an echo canceller's reference (llamactl.devices.echo)
        self.on_played: Callable[[bytes], None] | None = None
        self._lock = threading.Lock()
        self._queued = bytearray()
        self._item: str | None = None
        self._played = 0  # samples of self._item already played

    def play(self, item_id: str | None, pcm: bytes) -> None:
        with self._lock:
            if item_id != self._item:
                self._item, self._played = item_id, 0
            self._queued += pcm

    def clear(self) -> tuple[str | None, int]:
        """Drop what is queued; returns (item id, milliseconds of it that were heard)."""
        with self._lock:
            self._queued.clear()
            return self._item, self._played * 1000 // self.rate

    @property
    def busy(self) -> bool:
        with self._lock:
            return bool(self._queued)

    def _take(self, nbytes: int) -> bytes:
        with self._lock:
            chunk = bytes(self._queued[:nbytes])
            del self._queued[:nbytes]
            self._played += len(chunk) // 2
            return chunk

    def close(self) -> None:
        with self._lock:
            self._queued.clear()


class SoundDevicePlayer(Player):
    """The default output device through a PortAudio callback stream."""

    available = True

    def __init__(self, device: int | None = None, factory: StreamFactory | None = None):
        super().__init__()
        self._stream = output_stream(
            self.rate,
            factory=factory,
            blocksize=self.rate * 20 // 1000,
            device=device,
            callback=self._callback,
        )

    def _callback(self, outdata: Any, frames: int, _time: Any, _status: Any) -> None:
        chunk = self._take(frames * 2)
        if len(chunk) < frames * 2:
            chunk += b"\x00" * (frames * 2 - len(chunk))
        outdata[:] = chunk
        if self.on_played is not None:
            self.on_played(chunk)

    def close(self) -> None:
        super().close()
        stream, self._stream = self._stream, None
        if stream is not None:
            try:
                stream.stop()
            finally:
                stream.close()


class CountingPlayer(Player):
    """A player that 'plays' instantly and keeps everything: tests and headless runs."""

    def __init__(self) -> None:
        super().__init__()
        self.received = bytearray()

    def play(self, item_id: str | None, pcm: bytes) -> None:
        super().play(item_id, pcm)
        self.received += pcm
        self._take(len(pcm))


class BlockingPlayer:
    """Plays int16 chunks by writing them to the stream (`llamactl tts --play`)."""

    def __init__(self, rate: int, factory: StreamFactory | None = None) -> None:
        self._stream = output_stream(rate, factory=factory)

    def write(self, chunk: Any) -> None:
        self._stream.write(chunk.tobytes())

    def stop(self) -> None:
        self._stream.stop()

    def close(self) -> None:
        self._stream.close()


def open_player(device: int | None = None) -> tuple[Player, str | None]:
    """The sound device player, or the silent one and the reason there is no sound."""
    try:
        return SoundDevicePlayer(device), None
    except AudioDeviceError as exc:  # PlaybackUnavailable, worded for sound output
        return Player(), str(exc)


__all__ = [
    "RATE",
    "BlockingPlayer",
    "CountingPlayer",
    "Player",
    "SoundDevicePlayer",
    "open_player",
    "output_stream",
]
