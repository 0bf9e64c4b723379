"""eSpeak NG backend: the library and voice data bundled by the `espeakng-loader` package.

It needs no model file, so `llamactl tts` speaks out of the box. eSpeak NG keeps its state in
process globals (one voice, one callback), so the process-wide instance, which lists and checks
voices, is used under `_LOCK`, and each synthesis speaks with a fresh private instance
(`synth_espeak_instances`): the same request gives the same samples, and concurrent requests
run side by side. The synthesis runs on a producer thread whose callback hands each buffer
(`_BUFFER_MS` long) to the caller's iterator at once; returning 1 from the callback is how
eSpeak is told to stop.
"""

from __future__ import annotations

import ctypes
import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from llamactl.core.errors import InvalidRequestError, SynthesisError

from .synth import (
    Synthesizer,
    Voice,
    check_speed,
    check_text,
    refuse_cloning,
)
from .synth_espeak_instances import InstancePool
from .synth_espeak_lib import EspeakVoice, load_library, voice_languages
from .synth_espeak_voices import ListedVoice, VoiceNames, variant_files

DEFAULT_VOICE = "en-us"
_BUFFER_MS = 60
_SYNCHRONOUS = 2  # AUDIO_OUTPUT_SYNCHRONOUS: the callback receives every buffer
_PARAM_RATE = 1  # espeakRATE, words per minute
_DEFAULT_WPM = 175
_WPM_RANGE = (80, 450)
_POS_CHARACTER = 1
_CHARS_UTF8 = 1
_EE_OK = 0
_GENDERS = {1: "male", 2: "female"}
_IPA = 0x02  # espeak_TextToPhonemes phonememode: UTF-8 IPA rather than eSpeak's ASCII names
_ENDINGS = b",.;:!?"
_CALLBACK = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p
)

_LOCK = threading.Lock()


@dataclass(frozen=True)
class Clause:
    """One clause of text in IPA and the punctuation that ended it (`""` if none)."""

    ipa: str
    ending: str


def _clause_ending(read: bytes) -> str:
    """The punctuation that ended the clause eSpeak just read. eSpeak reads a character or
    two past the clause (its pointer lands inside the next word) and does not return the
    punctuation, so it is the last of `,.;:!?` followed by a space or the end of the text."""
    for i in range(len(read) - 1, -1, -1):
        if read[i] in _ENDINGS and (i + 1 == len(read) or read[i + 1 : i + 2].isspace()):
            return chr(read[i])
    return ""


@dataclass(frozen=True)
class _Loaded:
    """eSpeak NG as initialised for this process, and the voices it lists (once each)."""

    lib: ctypes.CDLL  # lists and checks voices; never speaks (see synth_espeak_instances)
    rate: int
    data_dir: Path
    instances: InstancePool  # what speaks: a fresh instance per synthesis


@dataclass(frozen=True)
class _VoiceLists:
    table: dict[str, Voice]  # listed name (lower case) -> voice
    names: VoiceNames


_loaded: _Loaded | None = None
_voices_read: _VoiceLists | None = None


def _library() -> _Loaded:
    """Load and initialise eSpeak NG once per process (it cannot be loaded twice)."""
    global _loaded
    if _loaded is None:
        import espeakng_loader

        lib = load_library(espeakng_loader.get_library_path())
        data_dir = Path(espeakng_loader.get_data_path())  # .../espeak-ng-data
        rate = lib.espeak_Initialize(_SYNCHRONOUS, _BUFFER_MS, str(data_dir.parent).encode(), 0)
        if rate <= 0:
            raise SynthesisError(f"eSpeak NG did not initialise (data in {data_dir})")
        pool = InstancePool(
            Path(espeakng_loader.get_library_path()),
            data_dir.parent,
            output_mode=_SYNCHRONOUS,
            buffer_ms=_BUFFER_MS,
        )
        _loaded = _Loaded(lib, rate, data_dir, pool)
    return _loaded


class EspeakSynthesizer(Synthesizer):
    """eSpeak NG voices; `seed` is accepted and ignored: the same text, voice and speed
    always give the same samples."""

    name = "espeak-ng"
    can_clone = False

    def __init__(self) -> None:
        with _LOCK:
            loaded = _library()
        self._lib, self._rate, self._data_dir = loaded.lib, loaded.rate, loaded.data_dir
        self._instances = loaded.instances

    @property
    def sample_rate(self) -> int:
        return self._rate

    def voices(self) -> list[Voice]:
        with _LOCK:
            return sorted(self._voice_lists().table.values(), key=lambda voice: voice.name)

    def _voice_lists(self) -> _VoiceLists:
        """The voices eSpeak lists, read once; caller holds `_LOCK`."""
        global _voices_read
        if _voices_read is None:
            table: dict[str, Voice] = {}
            listed: list[ListedVoice] = []
            found = self._lib.espeak_ListVoices(None)
            i = 0
            while found and found[i]:
                v: EspeakVoice = found[i].contents
                ident = (v.identifier or b"").decode(errors="replace")
                langs = voice_languages(v.languages)
                name = langs[0] if langs else ident
                description = (v.name or b"").decode(errors="replace")
                table[name.lower()] = Voice(
                    name=name,
                    description=description,
                    languages=tuple(langs),
                    gender=_GENDERS.get(v.gender, ""),
                )
                if ident:
                    listed.append(ListedVoice(ident, tuple(langs), description))
                i += 1
            variants = variant_files(self._data_dir)
            _voices_read = _VoiceLists(table, VoiceNames(listed, variants))
        return _voices_read

    def _voice_id(self, voice: str) -> bytes:
        """What eSpeak is given for a client's `voice`: only names from its own lists (see
        `synth_espeak_voices`), never the string itself; caller holds `_LOCK`."""
        return self._voice_lists().names.resolve(voice)

    def synthesize(
        self,
        text: str,
        *,
        voice: str | None = None,
        speed: float = 1.0,
        speaker_ref: bytes | None = None,
        seed: int | None = None,
    ) -> Iterator[np.ndarray]:
        refuse_cloning("eSpeak NG", speaker_ref)
        wpm = int(round(_DEFAULT_WPM * check_speed(speed)))
        wpm = min(max(wpm, _WPM_RANGE[0]), _WPM_RANGE[1])
        voice = voice or DEFAULT_VOICE
        check_text(text)
        with _LOCK:  # checked now, so a bad name fails before any audio is promised
            voice_id = self._voice_id(voice)
            if self._lib.espeak_SetVoiceByName(voice_id) != _EE_OK:
                raise InvalidRequestError(
                    f"Field 'voice': eSpeak NG cannot load the voice {voice!r} (an mbrola "
                    "voice without mbrola?); `llamactl tts --list-voices` lists them"
                )
        return self._stream(text, voice_id, wpm)

    def phonemes(self, text: str, voice: str) -> list[Clause]:
        """`text` as eSpeak reads it, clause by clause, in IPA: what a neural voice trained
        on eSpeak's phonemes (Piper) speaks from. A fresh instance reads it, so the same text
        always gives the same phonemes and readers run side by side."""
        check_text(text)
        with _LOCK:
            voice_id = self._voice_id(voice)
        data = text.encode("utf-8")
        clauses: list[Clause] = []
        with self._instances.instance() as lib:
            if lib.espeak_SetVoiceByName(voice_id) != _EE_OK:
                raise SynthesisError(f"eSpeak NG cannot load the voice {voice!r}")
            buffer = ctypes.create_string_buffer(data + b"\0")
            base = ctypes.addressof(buffer)
            cursor = ctypes.c_void_p(base)
            while cursor.value:
                start = cursor.value - base
                read = lib.espeak_TextToPhonemes(ctypes.byref(cursor), _CHARS_UTF8, _IPA)
                end = cursor.value - base if cursor.value else len(data)
                ipa = (read or b"").decode("utf-8", errors="replace").strip()
                ending = _clause_ending(data[start:end])
                if ipa or ending:
                    clauses.append(Clause(ipa, ending))
        return clauses

    def _stream(self, text: str, voice_id: bytes, wpm: int) -> Iterator[np.ndarray]:
        """Generator: nothing runs until the first `next()`; closing it cancels eSpeak."""
        chunks: queue.SimpleQueue[np.ndarray | BaseException | None] = queue.SimpleQueue()
        cancel = threading.Event()

        def on_audio(wav, n, _events) -> int:
            if cancel.is_set():
                return 1
            if n > 0 and wav:
                chunks.put(np.ctypeslib.as_array(wav, shape=(n,)).copy())
            return 0

        callback = _CALLBACK(on_audio)  # referenced here until the producer is joined

        def produce() -> None:
            try:
                with self._instances.instance() as lib:
                    lib.espeak_SetSynthCallback(ctypes.cast(callback, ctypes.c_void_p))
                    lib.espeak_SetVoiceByName(voice_id)
                    lib.espeak_SetParameter(_PARAM_RATE, wpm, 0)
                    data = text.encode("utf-8") + b"\0"
                    err = lib.espeak_Synth(
                        data, len(data), 0, _POS_CHARACTER, 0, _CHARS_UTF8, None, None
                    )
                    lib.espeak_Synchronize()
                if err != _EE_OK and not cancel.is_set():
                    raise SynthesisError(f"eSpeak NG failed (error {err})")
            except BaseException as exc:  # handed to the consumer
                chunks.put(exc)
            finally:
                chunks.put(None)

        producer = threading.Thread(target=produce, name="espeak-synth", daemon=True)
        producer.start()
        try:
            while (item := chunks.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            cancel.set()  # closed early: the callback tells eSpeak to stop at its next buffer
            producer.join()
