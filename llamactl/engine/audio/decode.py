"""Reading audio files and uploads into mono float32 at their own sample rate.

WAV (the common case, and what tests write) is read with the standard library; everything
else (FLAC, MP3, Ogg, WebM, M4A, WAV codecs `wave` does not know) through PyAV, which
faster-whisper already brings along.

Nothing about the bytes is trusted:
- The container is recognised from its first bytes and opened with that one demuxer
  (`AUDIO_FORMATS`), never by FFmpeg's probing: a probed upload could be an `ffconcat` or HLS
  playlist, which makes FFmpeg open the files it names on the server's disk (issue 31).
- A sample rate outside `FILE_RATES` is refused (rate 0 would divide by zero, rate 1 turns a
  few KB into hours of audio).
- With `max_seconds`, the length the header states is checked before anything is decoded, and
  the decoded length is bounded while decoding (headers can lie). The bound is also tied to
  the file's size (`MIN_BYTES_PER_SECOND`): past the first minute, a second of audio must cost
  at least 250 bytes, below the lowest bitrate any speech codec writes, so a few hundred KB of
  FLAC cannot expand into an hour of samples.
"""

from __future__ import annotations

import io
import wave
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from llamactl.core.errors import AudioDecodeError, AudioTooLongError, FileRefusedError
from llamactl.core.files import open_regular

from .pcm import resample, to_float32

FILE_RATES = (1000, 384000)  # Hz: below is no real recording, above no real converter

# The containers llamactl reads, by their first bytes, and the one FFmpeg demuxer each is
# opened with. Anything else (playlists, image sequences, raw streams...) is refused.
AUDIO_FORMATS = "WAV, FLAC, MP3, Ogg (Vorbis, Opus), WebM/Matroska, MP4/M4A"

# 2 kbps: Opus, the most frugal codec here, writes 6 kbps at its lowest. Past FREE_SECONDS a
# file must hold this many bytes per second of audio it claims to hold.
MIN_BYTES_PER_SECOND = 250
FREE_SECONDS = 60.0


def check_file_rate(rate: int) -> int:
    low, high = FILE_RATES
    if not low <= rate <= high:
        raise AudioDecodeError(
            f"the audio's sample rate {rate} Hz is not plausible (from {low} to {high} Hz)"
        )
    return rate


def sniff_format(head: bytes) -> str | None:
    """The FFmpeg demuxer for a file starting with `head` (its first 12 bytes or more), or
    None when it is none of `AUDIO_FORMATS`."""
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "wav"
    if head[:4] == b"fLaC":
        return "flac"
    if head[:4] == b"OggS":
        return "ogg"
    if head[:4] == b"\x1a\x45\xdf\xa3":
        return "matroska"
    if head[4:8] == b"ftyp":
        return "mov"
    if head[:3] == b"ID3":
        return "mp3"
    # an MPEG audio frame: 11 sync bits, then a layer that is not the reserved 00 (ADTS AAC)
    if len(head) >= 2 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0 and head[1] & 0x06:
        return "mp3"
    return None


@dataclass(frozen=True)
class AudioBound:
    """How much audio one file may hold: `max_seconds`, and no more than its size pays for."""

    max_seconds: float
    size: int

    @property
    def seconds(self) -> float:
        paid = max(FREE_SECONDS, self.size / MIN_BYTES_PER_SECOND)
        return min(self.max_seconds, paid)

    def check(self, seconds: float) -> None:
        if seconds <= self.seconds:
            return
        if seconds > self.max_seconds:
            raise _too_long(self.max_seconds)
        raise AudioTooLongError(
            f"the file claims {seconds:.0f} s of audio in {self.size} bytes, less than "
            f"{MIN_BYTES_PER_SECOND * 8 / 1000:g} kbps, which no speech codec writes; "
            f"such a file may hold at most {self.seconds:.0f} s"
        )


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
    refusing more than `max_seconds` of audio (and, with it, more than the file's size pays
    for: `AudioBound`). With `rate`, the samples are at that rate (decoded straight to it: an
    hour at 48 kHz never exists in memory when 16 kHz is wanted); otherwise at the file's own."""
    data = _read_file(Path(source)) if isinstance(source, str | Path) else source
    if isinstance(data, bytes | bytearray):
        if not data:
            raise AudioDecodeError("the audio file is empty")
        buf: BinaryIO = io.BytesIO(data)
    else:
        buf = data
    start = buf.tell() if buf.seekable() else 0
    size = buf.seek(0, io.SEEK_END) - start if buf.seekable() else 0
    buf.seek(start)
    head = buf.read(12)
    buf.seek(start)
    fmt = sniff_format(head)
    if fmt is None:
        raise AudioDecodeError(f"the file is not audio llamactl reads ({AUDIO_FORMATS})")
    bound = AudioBound(max_seconds, size) if max_seconds is not None else None
    if fmt == "wav":
        try:
            samples, native = _read_wav(buf, max_seconds)
        except (wave.Error, EOFError, ValueError):
            buf.seek(start)  # a WAV codec `wave` does not read (float, ADPCM...): try PyAV
        else:
            if rate is None or rate == native:
                return samples, native
            return resample(samples, native, rate), rate
    return _read_av(buf, fmt, bound, rate)


def _read_file(path: Path) -> bytes:
    """A regular file's bytes; anything else (a FIFO, a device) is refused without blocking."""
    try:
        with open_regular(path) as f:
            return f.read()
    except FileRefusedError:
        raise AudioDecodeError(f"{path} is not a regular file") from None
    except OSError as exc:
        raise AudioDecodeError(f"could not open {path}: {exc.strerror}") from None


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


# FFmpeg options for an upload: the demuxer is the one `sniff_format` chose, and no demuxer
# may open anything but the buffer it was given (no files, no network, no nested playlists).
_SAFE_OPTIONS = {"protocol_whitelist": "none", "format_whitelist": "", "enable_drefs": "0"}


def _read_av(
    buf: BinaryIO, fmt: str, bound: AudioBound | None, out_rate: int | None
) -> tuple[np.ndarray, int]:
    import av  # imported here: only non-WAV input needs it

    try:
        with av.open(
            buf,
            mode="r",
            format=fmt,
            options={**_SAFE_OPTIONS, "format_whitelist": fmt},
            metadata_errors="ignore",
        ) as container:
            if not container.streams.audio:
                raise AudioDecodeError("the file has no audio stream")
            stream = container.streams.audio[0]
            native = check_file_rate(int(stream.codec_context.sample_rate or stream.rate or 0))
            if bound is not None:
                stated = _stated_seconds(container, stream)
                if stated is not None:
                    bound.check(stated)  # before a single frame is decoded
            rate = out_rate or native
            limit = None if bound is None else bound.seconds * rate
            resampler = av.AudioResampler(format="flt", layout="mono", rate=rate)
            chunks: list[np.ndarray] = []
            total = 0
            for frame in container.decode(stream):
                for out in resampler.resample(frame):
                    chunks.append(out.to_ndarray().reshape(-1))
                    total += chunks[-1].size
                if bound is not None and limit is not None and total > limit:
                    bound.check(total / rate)
            for out in resampler.resample(None):
                chunks.append(out.to_ndarray().reshape(-1))
                total += chunks[-1].size
            if bound is not None and limit is not None and total > limit:
                bound.check(total / rate)
    except (AudioDecodeError, AudioTooLongError):
        raise
    except Exception as exc:  # PyAV raises many types for bad input
        # FFmpeg's own words, never its paths or errno numbers: the file is the client's
        reason = getattr(exc, "strerror", None) or type(exc).__name__
        raise AudioDecodeError(f"could not decode the audio ({fmt}): {reason}") from None
    if not chunks:
        raise AudioDecodeError("the audio stream holds no samples")
    return np.concatenate(chunks).astype(np.float32, copy=False), int(rate)


def _stated_seconds(container: object, stream: object) -> float | None:
    """The length the container's header states, when it states one."""
    duration = getattr(stream, "duration", None)
    time_base = getattr(stream, "time_base", None)
    if duration and time_base:
        return float(duration * time_base)
    total = getattr(container, "duration", None)  # in AV_TIME_BASE units (microseconds)
    if total and total > 0:
        return total / 1_000_000
    return None


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
