"""Streaming voice-activity detection with the Silero model that faster-whisper ships.

faster-whisper runs Silero over a whole file at once; a live stream needs the same network
fed 32 ms windows as they arrive. The ONNX graph takes its recurrent state (h, c) and the
last 64 samples of the previous window as inputs, so carrying them between calls gives
exactly the probabilities of a one-shot run (checked in tests/test_audio_vad.py).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from llamactl.core.vad_defaults import VAD_PREFIX_PADDING_MS, VAD_SILENCE_MS, VAD_THRESHOLD

VAD_RATE = 16000
WINDOW = 512  # samples per Silero window at 16 kHz (32 ms)
_CONTEXT = 64


@dataclass(frozen=True)
class VadConfig:
    """When speech starts and stops. Defaults follow OpenAI's server_vad."""

    threshold: float = VAD_THRESHOLD
    prefix_padding_ms: int = VAD_PREFIX_PADDING_MS  # audio kept before the detected start
    silence_duration_ms: int = VAD_SILENCE_MS  # silence that ends speech
    end_padding_ms: int = 200  # audio kept after the last speech window
    max_speech_s: float = 25.0  # longer speech is cut (Whisper reads 30 s windows)

    @property
    def neg_threshold(self) -> float:
        return max(self.threshold - 0.15, 0.01)

    def samples(self, ms: float) -> int:
        return int(ms * VAD_RATE / 1000)


@functools.cache
def _session():
    from faster_whisper.vad import get_vad_model

    return get_vad_model().session


class SileroStream:
    """Speech probabilities for consecutive 512-sample windows of one stream."""

    def __init__(self) -> None:
        self._session = _session()
        self._h = np.zeros((1, 1, 128), dtype=np.float32)
        self._c = np.zeros((1, 1, 128), dtype=np.float32)
        self._context = np.zeros(_CONTEXT, dtype=np.float32)

    def probs(self, audio: np.ndarray) -> np.ndarray:
        """One probability per window; `audio` holds a whole number of windows."""
        n = audio.size // WINDOW
        if n == 0:
            return np.zeros(0, dtype=np.float32)
        windows = np.ascontiguousarray(audio[: n * WINDOW], dtype=np.float32).reshape(n, WINDOW)
        previous = np.concatenate([self._context[None], windows[:-1, -_CONTEXT:]], axis=0)
        batch = np.concatenate([previous, windows], axis=1)
        out, self._h, self._c = self._session.run(
            None, {"input": batch, "h": self._h, "c": self._c}
        )
        self._context = windows[-1, -_CONTEXT:].copy()
        return np.asarray(out, dtype=np.float32).reshape(-1)


def speech_regions(audio: np.ndarray, config: VadConfig | None = None) -> list[tuple[int, int]]:
    """(start, end) sample ranges of speech in a whole 16 kHz buffer, with padding."""
    config = config or VadConfig()
    probs = SileroStream().probs(np.pad(audio, (0, (-audio.size) % WINDOW)))
    regions: list[tuple[int, int]] = []
    start: int | None = None
    quiet_from: int | None = None
    min_silence = config.samples(config.silence_duration_ms)
    for i, p in enumerate(probs):
        pos = i * WINDOW
        if start is None:
            if p >= config.threshold:
                start, quiet_from = pos, None
            continue
        if p >= config.threshold:
            quiet_from = None
        elif p < config.neg_threshold:
            quiet_from = pos if quiet_from is None else quiet_from
            if pos + WINDOW - quiet_from >= min_silence:
                regions.append((start, quiet_from))
                start = None
    if start is not None:
        regions.append((start, audio.size if quiet_from is None else quiet_from))
    pre = config.samples(config.prefix_padding_ms)
    post = config.samples(config.end_padding_ms)
    return [(max(0, s - pre), min(audio.size, e + post)) for s, e in regions]
