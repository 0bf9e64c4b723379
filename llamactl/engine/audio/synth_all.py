"""The voices llamactl speaks with out of the box: eSpeak NG's and the installed Piper voices.

One synthesizer for the front ends, so `voice` alone picks the engine: a Piper voice's name
(`en_US-joe-medium`, or `joe`) speaks with Piper, every other name goes to eSpeak NG, which
stays the default voice (it needs no model and repeats its samples exactly). A Piper voice at
another sample rate than eSpeak's is resampled as it streams.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from llamactl.core.errors import SynthesisError

from .pcm import StreamResampler
from .synth import Synthesizer, Voice, as_float32
from .synth_espeak import EspeakSynthesizer
from .synth_piper import PiperSynthesizer
from .synth_piper_voices import installed_voices

__all__ = ["EmbeddedVoices", "open_embedded"]


class EmbeddedVoices(Synthesizer):
    """eSpeak NG plus Piper, chosen by voice name."""

    name = "espeak-ng/piper"
    can_clone = False

    def __init__(self, espeak: EspeakSynthesizer, piper: PiperSynthesizer) -> None:
        self._espeak = espeak
        self._piper = piper

    @property
    def sample_rate(self) -> int:
        return self._espeak.sample_rate

    def voices(self) -> list[Voice]:
        return self._piper.voices() + self._espeak.voices()

    def synthesize(
        self,
        text: str,
        *,
        voice: str | None = None,
        speed: float = 1.0,
        speaker_ref: bytes | None = None,
        seed: int | None = None,
    ) -> Iterator[np.ndarray]:
        if voice is None or not self._piper.knows(voice):
            return self._espeak.synthesize(
                text, voice=voice, speed=speed, speaker_ref=speaker_ref, seed=seed
            )
        chunks = self._piper.synthesize(text, voice=voice, speed=speed, speaker_ref=speaker_ref)
        if self._piper.sample_rate == self.sample_rate:
            return chunks
        return _resampled(chunks, self._piper.sample_rate, self.sample_rate)


def _resampled(chunks: Iterator[np.ndarray], src: int, dst: int) -> Iterator[np.ndarray]:
    resampler = StreamResampler(src, dst)
    try:
        for chunk in chunks:
            yield resampler.push(as_float32(chunk))
        yield resampler.flush()
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()


def open_embedded() -> Synthesizer:
    """eSpeak NG with the Piper voices when any is installed (and loads), else eSpeak NG."""
    espeak = EspeakSynthesizer()
    if not installed_voices():
        return espeak
    try:
        return EmbeddedVoices(espeak, PiperSynthesizer(espeak))
    except SynthesisError:
        return espeak
