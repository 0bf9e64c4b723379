"""Reading audio files and uploads into mono float32 at their own sample rate.

WAV (the common case, and what tests write) is read with the standard library; everything
else (FLAC, MP3, Ogg, M4A, WAV codecs `wave` does not know) through PyAV, which faster-whisper
already brings along.

Headers are not trusted: a sample rate outside `FILE_RATES` is refused (rate 0 would divide by
zero, rate 1 turns a few KB into hours of audio), and `max_seconds` bounds the decoded length
while decoding, so a small compressed file cannot expand into gigabytes of samples.
"""

from __future__ import annotations

import io
import wave
from pathlib import Path
from typing import BinaryIO

import numpy as np

from llamactl.core.errors import AudioDecodeError, AudioTooLongError

from .pcm import resample, to_float32

FILE_RATES = (1000, 384000)  # Hz: below is no real recording, above no real converter


def check_file_rate(rate: int) -> int:
    low, high = FILE_RATES
    if not low <= rate <= high:
        raise AudioDecodeError(
            f"the audio's sample rate {rate} Hz is not plausible (from {low} to {high} Hz)"
        )
    return rate


def _too_long(max_seconds: float) -> AudioTooLongError:
    return AudioTooLongError(
        f"the audio is longer than {max_seconds:g} s (max_audio_seconds); cut it into parts"
    )


def read_audio(
    source: str | Path | bytes | BinaryIO,
    *,
    max_seconds: float | None = None,
    rate: int | None = None,
) -> tuple[np.ndarray, int]:
    """(mono float32 samples, sample rate) of a file path, bytes or binary file object,
    refusing more than `max_seconds` of audio. With `rate`, the samples are at that rate
    (decoded straight to it: an hour at 48 kHz never exists in memory when 16 kHz is wanted);
    otherwise at the file's own."""
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
            samples, native = _read_wav(buf, max_seconds)
        except (wave.Error, EOFError, ValueError):
            buf.seek(start)  # a WAV codec `wave` does not read (float, ADPCM...): try PyAV
        else:
            if rate is None or rate == native:
                return samples, native
            return resample(samples, native, rate), rate
    return _read_av(buf, max_seconds, rate)


def _read_wav(buf: BinaryIO, max_seconds: float | None) -> tuple[np.ndarray, int]:
    with wave.open(buf, "rb") as w:
        rate, channels, width = w.getframerate(), w.getnchannels(), w.getsampwidth()
        check_file_rate(rate)
        if channels < 1:
            raise AudioDecodeError("the WAV header says the audio has no channels")
        frames = w.getnframes()
        if max_seconds is not None and frames > max_seconds * rate:
            # the header can overstate what follows; count only the frames that are there
            frames = min(frames, int(max_seconds * rate) + 1)
        raw = w.readframes(frames)
        if max_seconds is not None and len(raw) // (width * channels) > max_seconds * rate:
            raise _too_long(max_seconds)
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


def _read_av(
    buf: BinaryIO, max_seconds: float | None, out_rate: int | None
) -> tuple[np.ndarray, int]:
    import av  # imported here: only non-WAV input needs it

    try:
        with av.open(buf, mode="r", metadata_errors="ignore") as container:
            if not container.streams.audio:
                raise AudioDecodeError("the file has no audio stream")
            stream = container.streams.audio[0]
            native = check_file_rate(int(stream.codec_context.sample_rate or stream.rate or 0))
            rate = out_rate or native
            resampler = av.AudioResampler(format="flt", layout="mono", rate=rate)
            chunks: list[np.ndarray] = []
            total = 0
            for frame in container.decode(stream):
                for out in resampler.resample(frame):
                    chunks.append(out.to_ndarray().reshape(-1))
                    total += chunks[-1].size
                if max_seconds is not None and total > max_seconds * rate:
                    raise _too_long(max_seconds)
            for out in resampler.resample(None):
                chunks.append(out.to_ndarray().reshape(-1))
                total += chunks[-1].size
            if max_seconds is not None and total > max_seconds * rate:
                raise _too_long(max_seconds)
    except (AudioDecodeError, AudioTooLongError):
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
