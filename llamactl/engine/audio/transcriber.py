"""The `Transcriber` interface every speech-to-text backend implements.

A backend only has to read one window of speech (at most 30 s, the longest any supported
model takes at once). Voice-activity detection, timestamps, batching of whole files and the
streaming commit rules are shared, so the backends behave alike. A transcriber is not
thread-safe: the `AudioWorker` that owns it is its only caller.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator

import numpy as np

from llamactl.core.errors import InvalidRequestError

from .pcm import resample, to_float32
from .types import Segment, WindowText
from .vad import VAD_RATE, VadConfig, speech_regions

MAX_WINDOW_S = 30.0


class Transcriber(abc.ABC):
    name: str = "transcriber"
    sample_rate: int = 16000
    threads: int = 1
    english_only: bool = False

    @abc.abstractmethod
    def transcribe_window(
        self, audio: np.ndarray, *, language: str | None = None, prompt: str | None = None
    ) -> WindowText:
        """Text of `audio` (mono float32 at `sample_rate`, at most 30 s)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Free the model's memory now rather than at garbage collection."""

    # ------------------------------------------------------------ shared parts
    def check_language(self, language: str | None) -> str | None:
        """The language code to pass on, or an error a user can act on."""
        if language in (None, "", "auto"):
            return None
        code = language.strip().lower()
        if self.english_only and code not in ("en", "english"):
            raise InvalidRequestError(
                f"the transcription model {self.name} knows English only; got language '{language}'"
            )
        return "en" if code == "english" else code

    def iter_transcribe(
        self,
        pcm: np.ndarray | bytes,
        rate: int,
        *,
        language: str | None = None,
        prompt: str | None = None,
    ) -> Iterator[Segment]:
        """Segments of a whole recording, in order, as each is read.

        Speech is found with VAD first, so silence never turns into text, and each region
        (cut at 25 s) is read in one window; its bounds are the segment's timestamps.
        """
        language = self.check_language(language)
        audio16 = resample(to_float32(pcm), rate, VAD_RATE)
        config = VadConfig()
        for start, end in split_long(speech_regions(audio16, config), config.max_speech_s):
            window = resample(audio16[start:end], VAD_RATE, self.sample_rate)
            read = self.transcribe_window(window, language=language, prompt=prompt)
            text = read.text.strip()
            if text:
                yield Segment(round(start / VAD_RATE, 3), round(end / VAD_RATE, 3), text)

    def transcribe(
        self,
        pcm: np.ndarray | bytes,
        rate: int,
        *,
        language: str | None = None,
        prompt: str | None = None,
    ) -> list[Segment]:
        """Every segment of a recording (batch)."""
        return list(self.iter_transcribe(pcm, rate, language=language, prompt=prompt))


def split_long(regions: list[tuple[int, int]], max_s: float) -> list[tuple[int, int]]:
    """Cut regions longer than `max_s` into equal parts that fit one window."""
    limit = int(max_s * VAD_RATE)
    out: list[tuple[int, int]] = []
    for start, end in regions:
        parts = max(1, -(-(end - start) // limit))
        step = -(-(end - start) // parts)
        out.extend((s, min(end, s + step)) for s in range(start, end, step))
    return out


def join_text(parts: list[str]) -> str:
    """Segment texts joined the way Whisper spaces them."""
    return " ".join(p.strip() for p in parts if p.strip())
