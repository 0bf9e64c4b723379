"""Microphone capture with sounddevice (PortAudio), for `llamactl transcribe --mic` and the TUI.

sounddevice needs the PortAudio shared library (Debian: `libportaudio2`); without it the
import fails with an OSError, which becomes one clear message here. Capture runs PortAudio's
callback thread and hands int16 blocks over a queue; anything with sounddevice's
`InputStream` signature can stand in (tests feed a WAV file through the same code).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from llamactl.core.errors import AudioDeviceError

PORTAUDIO_HINT = (
    "microphone input needs the PortAudio library, which is not installed: on Debian or "
    "Ubuntu run `sudo apt-get install libportaudio2` (scripts/install-system-deps.sh does it), "
    "on macOS `brew install portaudio`"
)


def _import_sounddevice() -> Any:
    import sounddevice

    return sounddevice


def sounddevice_module() -> Any:
    """The sounddevice module; a missing PortAudio or package is one clear AudioDeviceError
    (worded for the microphone: `playback` rewords it for sound output)."""
    try:
        return _import_sounddevice()
    except OSError as exc:  # "PortAudio library not found"
        raise AudioDeviceError(PORTAUDIO_HINT) from exc
    except ImportError as exc:
        raise AudioDeviceError(
            "microphone input needs the sounddevice package (PortAudio's Python binding): "
            f"pip install sounddevice ({exc})"
        ) from exc


def input_devices() -> list[dict[str, Any]]:
    """Devices that can record: index, name, channels, default rate, is_default."""
    sd = sounddevice_module()
    try:
        devices = sd.query_devices()
        default_in = sd.default.device[0] if sd.default.device else -1
    except Exception as exc:
        raise AudioDeviceError(f"could not list audio devices: {exc}") from exc
    out = []
    for index, dev in enumerate(devices):
        if dev.get("max_input_channels", 0) > 0:
            out.append(
                {
                    "index": index,
                    "name": dev.get("name", f"device {index}"),
                    "channels": int(dev["max_input_channels"]),
                    "default_rate": int(dev.get("default_samplerate") or 0),
                    "is_default": index == default_in,
                }
            )
    return out


StreamFactory = Callable[..., Any]


class Microphone:
    """Mono int16 blocks from an input device, as an iterator, until `stop()`."""

    def __init__(
        self,
        device: int | None = None,
        *,
        rate: int = 16000,
        block_ms: int = 100,
        stream_factory: StreamFactory | None = None,
        on_capture: Callable[[int], None] | None = None,
    ) -> None:
        self.rate = rate
        self.on_capture = on_capture  # told each block's size as it is recorded (its thread)
        self.device = device
        self.block = max(1, rate * block_ms // 1000)
        self._factory = stream_factory
        self._queue: queue.Queue[np.ndarray | None] = queue.Queue()
        self._stopped = threading.Event()
        self._stream: Any = None
        self.status_errors = 0

    def _callback(self, indata: Any, frames: int, _time: Any, status: Any) -> None:
        if status:
            self.status_errors += 1
        block = np.asarray(indata)
        if block.ndim == 2:
            block = block[:, 0]
        if self.on_capture is not None:
            self.on_capture(frames)
        self._queue.put(block.astype(np.int16, copy=True))

    def start(self) -> Microphone:
        factory = self._factory or sounddevice_module().InputStream
        try:
            self._stream = factory(
                samplerate=self.rate,
                channels=1,
                dtype="int16",
                blocksize=self.block,
                device=self.device,
                callback=self._callback,
                finished_callback=lambda: self._queue.put(None),
            )
            self._stream.start()
        except AudioDeviceError:
            raise
        except Exception as exc:  # PortAudioError, ValueError for a bad device index...
            where = "the default input device" if self.device is None else f"device {self.device}"
            raise AudioDeviceError(
                f"could not record from {where}: {exc} (see --list-devices)"
            ) from exc
        return self

    def blocks(self) -> Iterator[np.ndarray]:
        """Blocks as recorded; ends after `stop()` (or when the device stops)."""
        while True:
            try:
                block = self._queue.get(timeout=0.1)
            except queue.Empty:
                if self._stopped.is_set():
                    return
                continue
            if block is None:
                return
            yield block

    def stop(self) -> None:
        self._stopped.set()
        stream, self._stream = self._stream, None
        if stream is not None:
            try:
                stream.stop()
            finally:
                stream.close()

    def __enter__(self) -> Microphone:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
