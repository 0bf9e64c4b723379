"""Speech out: the `Synthesizer` interface every text-to-speech backend implements.

Front ends (`llamactl tts`, `POST /tts`, `/v1/audio/speech`) only see this interface, so a
backend is pluggable: eSpeak NG (`synth_espeak`) and Piper's neural voices (`synth_piper`)
ship today and work offline out of the box; a llama.cpp `mtmd` backend (pocket-tts,
Qwen3-TTS) can be registered under another name with `register_backend` without touching
the front ends.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from llamactl.core.errors import (
    InvalidRequestError,
    UnsupportedVoiceFeature,
)


@dataclass(frozen=True)
class Voice:
    """A voice a backend can speak with; `name` is what `voice=` accepts."""

    name: str
    description: str = ""
    languages: tuple[str, ...] = ()
    gender: str = ""


class Synthesizer(ABC):
    """Text in, mono PCM chunks out at `sample_rate`, each chunk yielded as soon as it exists.

    Chunks are 1-D numpy arrays, int16 or float32 in [-1, 1]; use `as_int16` / `as_float32`.
    Closing the iterator early (or `cancel_event.set()`) stops the backend within one chunk.
    """

    name: str = "synthesizer"
    can_clone: bool = False

    @property
    @abstractmethod
    def sample_rate(self) -> int: ...

    @abstractmethod
    def voices(self) -> list[Voice]: ...

    @abstractmethod
    def synthesize(
        self,
        text: str,
        *,
        voice: str | None = None,
        speed: float = 1.0,
        speaker_ref: bytes | None = None,
        seed: int | None = None,
    ) -> Iterator[np.ndarray]: ...

    def close(self) -> None:  # noqa: B027 - optional hook, not abstract
        """Free the backend's resources; the default has none."""


def check_speed(speed: float) -> float:
    """OpenAI's range for `speed`: 0.25 to 4.0."""
    if not 0.25 <= speed <= 4.0:
        raise InvalidRequestError(f"Field 'speed': must be between 0.25 and 4.0, got {speed}")
    return float(speed)


def refuse_cloning(engine: str, speaker_ref: bytes | None) -> None:
    """Voices that cannot be cloned say so when a reference is sent."""
    if speaker_ref:
        raise UnsupportedVoiceFeature(
            f"{engine} cannot clone a voice from speaker_ref; that needs an mtmd TTS model"
        )


def check_text(text: str) -> str:
    """Text a backend can encode: a lone surrogate (JSON allows `"\\ud800"`) has no UTF-8
    form, so it is refused up front rather than failing inside the backend mid-stream."""
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidRequestError(
                f"Field 'input': character {exc.start} is a lone surrogate "
                f"(U+{ord(text[exc.start]):04X}), which is not valid Unicode"
            ) from None
    return text


def as_int16(chunk: np.ndarray) -> np.ndarray:
    if chunk.dtype == np.int16:
        return chunk
    return (np.clip(chunk, -1.0, 1.0) * 32767.0).astype(np.int16)


def as_float32(chunk: np.ndarray) -> np.ndarray:
    if chunk.dtype == np.int16:
        return chunk.astype(np.float32) / 32768.0
    return chunk.astype(np.float32, copy=False)


_BACKENDS: dict[str, Callable[[], Synthesizer]] = {}


def register_backend(name: str, factory: Callable[[], Synthesizer]) -> None:
    """Make a backend available to `open_synthesizer(name)`."""
    _BACKENDS[name] = factory


def open_synthesizer(backend: str = "embedded") -> Synthesizer:
    """The named backend. `embedded` (the default) needs no model file: eSpeak NG's voices
    and the installed Piper voices, picked by voice name (`synth_all`); `espeak` and `piper`
    are each alone."""
    if "embedded" not in _BACKENDS:
        from .synth_all import open_embedded
        from .synth_espeak import EspeakSynthesizer
        from .synth_piper import PiperSynthesizer

        _BACKENDS.setdefault("embedded", open_embedded)
        _BACKENDS.setdefault("espeak", EspeakSynthesizer)
        _BACKENDS.setdefault("piper", PiperSynthesizer)
    try:
        factory = _BACKENDS[backend]
    except KeyError:
        raise InvalidRequestError(
            f"unknown speech backend '{backend}'; available: {', '.join(sorted(_BACKENDS))}"
        ) from None
    return factory()
