"""Reading audio files and uploads into mono float32 at their own sample rate.

WAV (the common case, and what tests write) is read with the standard library; everything
else (FLAC, MP3, Ogg, M4A, WAV codecs `wave` does not know) through PyAV, which faster-whisper
already brings along.
"""

from __future__ import annotations

import io
import wave
from pathlib import Path
from typing import BinaryIO

import numpy as np

from llamactl.engine.errors import InvalidRequestError

from .pcm import to_float32


class AudioDecodeError(InvalidRequestError):
    """The bytes are not audio we can read."""


def read_audio(source: str | Path | bytes | BinaryIO) -> tuple[np.ndarray, int]:
    """(mono float32 samples, sample rate) of a file path, bytes or binary file object."""
    data = Path(source).read_bytes() if isinstance(source, str | Path) else source
    if isinstance(data, bytes | bytearray):
        if not data:
            raise AudioDecodeError("the audio file is empty")
        buf: BinaryIO = io.BytesIO(data)
    else:
        buf = data
    start = buf.tell() if buf.seekable() else 0
    head = buf.read(12)
    buf.seek(start)
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        try:
            return _read_wav(buf)
        except (wave.Error, EOFError, ValueError):
            buf.seek(start)  # a WAV codec `wave` does not read (float, ADPCM...): try PyAV
    return _read_av(buf)


def _read_wav(buf: BinaryIO) -> tuple[np.ndarray, int]:
    with wave.open(buf, "rb") as w:
        rate, channels, width = w.getframerate(), w.getnchannels(), w.getsampwidth()
        raw = w.readframes(w.getnframes())
    if width == 2:
        samples = np.frombuffer(raw, dtype="<i2")
    elif width == 4:
        samples = np.frombuffer(raw, dtype="<i4")
    elif width == 1:
        samples = np.frombuffer(raw, dtype=np.uint8)
    elif width == 3:
        b = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 3).astype(np.int32)
        samples = ((b[:, 0] << 8) | (b[:, 1] << 16) | (b[:, 2] << 24)).astype(np.int32)
    else:
        raise ValueError(f"unsupported WAV sample width {width}")
    if channels > 1:
        samples = samples.reshape(-1, channels)
    return to_float32(samples), rate


def _read_av(buf: BinaryIO) -> tuple[np.ndarray, int]:
    import av  # imported here: only non-WAV input needs it

    try:
        with av.open(buf, mode="r", metadata_errors="ignore") as container:
            if not container.streams.audio:
                raise AudioDecodeError("the file has no audio stream")
            stream = container.streams.audio[0]
            rate = stream.codec_context.sample_rate or stream.rate
            resampler = av.AudioResampler(format="flt", layout="mono", rate=rate)
            chunks = []
            for frame in container.decode(stream):
                for out in resampler.resample(frame):
                    chunks.append(out.to_ndarray().reshape(-1))
            for out in resampler.resample(None):
                chunks.append(out.to_ndarray().reshape(-1))
    except AudioDecodeError:
        raise
    except Exception as exc:  # PyAV raises many types for bad input
        raise AudioDecodeError(f"could not decode the audio: {exc}") from exc
    if not chunks:
        raise AudioDecodeError("the audio stream holds no samples")
    return np.concatenate(chunks).astype(np.float32), int(rate)


def wav_bytes(audio: np.ndarray, rate: int) -> bytes:
    """A 16-bit mono WAV file of `audio` (float32 in [-1, 1])."""
    from .pcm import to_pcm16

    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(to_pcm16(audio))
    return out.getvalue()
