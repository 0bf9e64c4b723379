"""Audio in for the TUI, behind a small interface so a file can stand in for the mic.

An `AudioSource` delivers PCM16 mono blocks at `RATE` on its own thread until it is stopped
or runs out (a file does); the app forwards them to the server and shows their level. The
devices themselves (microphone, sound output) live in `llamactl.devices`.
"""

from __future__ import annotations

import abc
import math
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from llamactl import AudioDeviceError, LlamactlError
from llamactl.devices import RATE, Microphone

BLOCK_MS = 50

BlockCallback = Callable[[np.ndarray], None]
EndCallback = Callable[[], None]


def level_dbfs(block: np.ndarray) -> float:
    """RMS level of int16 samples in dBFS (-96 for digital silence)."""
    if block.size == 0:
        return -96.0
    x = block.astype(np.float64) / 32768.0
    rms = math.sqrt(float(np.mean(x * x)))
    return max(-96.0, 20 * math.log10(rms)) if rms > 0 else -96.0


class AudioSource(abc.ABC):
    """Blocks of int16 samples, pushed from a thread to `on_block`; `on_end` when it runs out.

    `start()` raises AudioDeviceError synchronously (no microphone, PortAudio missing), so the
    caller can show the error before any thread exists.
    """

    name = "audio"
    rate = RATE
    live = True  # a microphone; False: a recording, started once the session can take it

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        # told each block's size the moment a device records it (an echo canceller's clock)
        self.on_capture: Callable[[int], None] | None = None

    def open(self) -> None:  # noqa: B027 - optional hook: a recording has nothing to acquire
        """Acquire the device (may raise AudioDeviceError)."""

    @abc.abstractmethod
    def blocks(self):  # -> Iterator[np.ndarray]
        """The samples, block by block, until the source ends or is stopped."""

    def close(self) -> None:  # noqa: B027 - optional hook, as open()
        """Release the device."""

    def start(self, on_block: BlockCallback, on_end: EndCallback) -> None:
        self._stop.clear()
        self.open()

        def pump() -> None:
            try:
                for block in self.blocks():
                    if self._stop.is_set():
                        return
                    on_block(block)
            finally:
                self.close()
                if not self._stop.is_set():
                    on_end()

        self._thread = threading.Thread(target=pump, name=f"tui-{self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.close()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()


class MicSource(AudioSource):
    """A sounddevice input device (`device` is its index; None: the default one)."""

    def __init__(self, device: int | None = None) -> None:
        super().__init__()
        self.device = device
        self.name = "default microphone" if device is None else f"device {device}"
        self._mic: Microphone | None = None

    def open(self) -> None:
        self._mic = Microphone(
            self.device, rate=self.rate, block_ms=BLOCK_MS, on_capture=self.on_capture
        ).start()

    def blocks(self):
        assert self._mic is not None
        yield from self._mic.blocks()

    def close(self) -> None:
        mic, self._mic = self._mic, None
        if mic is not None:
            mic.stop()


class FileSource(AudioSource):
    """A sound file played as if spoken: resampled to RATE, cut into blocks, paced at `speed`
    times real time (0: as fast as possible), then `tail_s` seconds of silence (speech needs an
    end) and the end of the source."""

    def __init__(self, path: str | Path, *, speed: float = 1.0, tail_s: float = 1.0) -> None:
        super().__init__()
        self.live = False
        self.path = Path(path)
        self.name = self.path.name
        self.speed = speed
        self.tail_s = tail_s
        self._samples: np.ndarray | None = None

    def open(self) -> None:
        from llamactl import read_audio, resample

        try:
            audio, rate = read_audio(self.path)
        except (OSError, ValueError, LlamactlError) as exc:
            raise AudioDeviceError(f"cannot read {self.path}: {exc}") from None
        audio = resample(audio, rate, self.rate)
        tail = np.zeros(int(self.tail_s * self.rate), np.float32)
        both = np.concatenate([audio, tail])
        self._samples = (np.clip(both, -1, 1) * 32767).astype(np.int16)

    def blocks(self):
        assert self._samples is not None
        step = self.rate * BLOCK_MS // 1000
        t0 = time.monotonic()
        for i, start in enumerate(range(0, self._samples.size, step)):
            if self._stop.is_set():
                return
            if self.speed > 0:
                due = t0 + i * BLOCK_MS / 1000 / self.speed
                delay = due - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            yield self._samples[start : start + step]


# ---------------------------------------------------------------------------- output
