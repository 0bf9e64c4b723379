"""Containers for synthesized speech: WAV, raw PCM, and FLAC / MP3 through PyAV.

WAV and PCM can be written chunk by chunk (a streamed WAV header carries the "unknown length"
sizes players accept), so they stream; FLAC and MP3 are encoded once the audio is complete.
"""

from __future__ import annotations

import io
import struct

import numpy as np

FORMATS = ("wav", "pcm", "flac", "mp3")
STREAMABLE = ("wav", "pcm")
MEDIA_TYPES = {
    "wav": "audio/wav",
    "pcm": "audio/pcm",
    "flac": "audio/flac",
    "mp3": "audio/mpeg",
}
_UNKNOWN = 0xFFFFFFFF


def wav_header(rate: int, n_samples: int | None = None) -> bytes:
    """44-byte header of a mono 16-bit WAV; without `n_samples`, the streaming form."""
    data = _UNKNOWN if n_samples is None else n_samples * 2
    riff = _UNKNOWN if n_samples is None else 36 + data
    return (
        b"RIFF"
        + struct.pack("<I", riff)
        + b"WAVEfmt "
        + struct.pack("<IHHIIHH", 16, 1, 1, rate, rate * 2, 2, 16)
        + b"data"
        + struct.pack("<I", data)
    )


def pcm_bytes(samples: np.ndarray) -> bytes:
    """int16 little-endian, what `audio/pcm` carries."""
    return np.asarray(samples, dtype="<i2").tobytes()


def encode(samples: np.ndarray, rate: int, fmt: str) -> bytes:
    """The whole utterance (int16) in `fmt`, one of `FORMATS`."""
    if fmt == "pcm":
        return pcm_bytes(samples)
    if fmt == "wav":
        return wav_header(rate, samples.size) + pcm_bytes(samples)
    if fmt in ("flac", "mp3"):
        return _encode_av(samples, rate, fmt)
    raise ValueError(f"unknown audio format '{fmt}'; expected one of {', '.join(FORMATS)}")


def _encode_av(samples: np.ndarray, rate: int, fmt: str) -> bytes:
    import av

    out = io.BytesIO()
    with av.open(out, "w", format=fmt) as container:
        stream = container.add_stream(fmt, rate=rate)
        stream.layout = "mono"
        frame = av.AudioFrame.from_ndarray(
            np.asarray(samples, dtype=np.int16).reshape(1, -1), format="s16", layout="mono"
        )
        frame.sample_rate = rate
        for packet in stream.encode(frame):
            container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return out.getvalue()
