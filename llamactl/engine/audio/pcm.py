"""PCM conversions and resampling: every path into the engine goes through here.

Audio arrives as int16 (little-endian bytes or arrays, what microphones and the realtime API
send) or float32 at whatever rate the source has; the engine works on mono float32 in
[-1, 1]. Resampling uses soxr, which keeps a streaming filter state so chunked input gives
the same samples as one long buffer.
"""

from __future__ import annotations

import numpy as np
import soxr

from llamactl.core.errors import InvalidRequestError

MIN_RATE = 8000
MAX_RATE = 192000


def check_rate(rate: int) -> int:
    if not isinstance(rate, int) or not MIN_RATE <= rate <= MAX_RATE:
        raise InvalidRequestError(
            f"sample rate must be an integer between {MIN_RATE} and {MAX_RATE} Hz, got {rate!r}"
        )
    return rate


def to_float32(pcm: bytes | bytearray | memoryview | np.ndarray) -> np.ndarray:
    """Mono float32 samples from int16 LE bytes, or from an int/float array (frames[, ch])."""
    if isinstance(pcm, bytes | bytearray | memoryview):
        raw = bytes(pcm)
        if len(raw) % 2:
            raise InvalidRequestError("PCM16 audio must have an even number of bytes")
        return np.frombuffer(raw, dtype="<i2").astype(np.float32) / 32768.0
    arr = np.asarray(pcm)
    if arr.ndim == 2:  # (frames, channels): downmix
        arr = arr.mean(axis=1) if arr.dtype.kind == "f" else arr.astype(np.float64).mean(axis=1)
        if np.asarray(pcm).dtype.kind in "iu":
            arr = arr.astype(np.asarray(pcm).dtype)
    elif arr.ndim != 1:
        raise InvalidRequestError(f"audio must be 1-D or (frames, channels), got shape {arr.shape}")
    if arr.dtype == np.int16:
        return arr.astype(np.float32) / 32768.0
    if arr.dtype == np.int32:
        return (arr.astype(np.float64) / 2147483648.0).astype(np.float32)
    if arr.dtype == np.uint8:
        return (arr.astype(np.float32) - 128.0) / 128.0
    if arr.dtype.kind == "f":
        return np.ascontiguousarray(arr, dtype=np.float32)
    raise InvalidRequestError(f"unsupported sample type {arr.dtype}")


def to_pcm16(audio: np.ndarray) -> bytes:
    """float32 in [-1, 1] to int16 little-endian bytes (clipped)."""
    clipped = np.clip(np.asarray(audio, dtype=np.float32), -1.0, 1.0)
    return (clipped * 32767.0).round().astype("<i2").tobytes()


def resample(audio: np.ndarray, src: int, dst: int) -> np.ndarray:
    """One-shot resampling of a whole buffer."""
    audio = np.ascontiguousarray(audio, dtype=np.float32)
    if src == dst or audio.size == 0:
        return audio
    return np.ascontiguousarray(soxr.resample(audio, src, dst, quality="HQ"), dtype=np.float32)


class StreamResampler:
    """Chunked resampling from `src` to `dst` with the filter state kept between chunks."""

    def __init__(self, src: int, dst: int) -> None:
        self.src = src
        self.dst = dst
        self._stream = None if src == dst else soxr.ResampleStream(src, dst, 1, "float32", "HQ")

    def push(self, audio: np.ndarray) -> np.ndarray:
        if self._stream is None:
            return audio
        return self._stream.resample_chunk(np.ascontiguousarray(audio, dtype=np.float32))

    def flush(self) -> np.ndarray:
        """The samples still inside the filter; the resampler starts afresh afterwards."""
        if self._stream is None:
            return np.zeros(0, dtype=np.float32)
        tail = self._stream.resample_chunk(np.zeros(0, dtype=np.float32), last=True)
        self._stream = soxr.ResampleStream(self.src, self.dst, 1, "float32", "HQ")
        return tail
