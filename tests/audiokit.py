"""Speech made in the tests: eSpeak NG from the `espeakng-loader` package, through ctypes.

No recordings are shipped and nothing is downloaded: sentences are synthesized on the fly
(22.05 kHz int16 from eSpeak), cached per process, and scored with a word error rate.
"""

from __future__ import annotations

import ctypes
import functools
import io
import re
import subprocess
import sys
import threading
import wave
from pathlib import Path

import numpy as np

SENTENCES = (
    "The weather is nice today and we are going to the park.",
    "Please send the report to my office before noon on Friday.",
    "I would like a cup of coffee with milk and no sugar.",
    "The train to the city leaves at seven in the morning.",
    "She opened the window because the room was very warm.",
)

_SYNCHRONOUS = 2  # AUDIO_OUTPUT_SYNCHRONOUS
_RATE_PARAM = 1  # espeakRATE
_CHARS_UTF8 = 1
_CALLBACK = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p
)


def _shared_lock() -> threading.Lock:
    """The server's eSpeak lock: tests speak in the process that runs the server."""
    from llamactl.engine.audio.synth_espeak import _LOCK

    return _LOCK


_lock = _shared_lock()


class _Espeak:
    def __init__(self) -> None:
        import espeakng_loader

        lib = ctypes.CDLL(espeakng_loader.get_library_path())
        lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
        lib.espeak_Synth.argtypes = [
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_uint,
            ctypes.c_int,
            ctypes.c_uint,
            ctypes.c_uint,
            ctypes.c_void_p,
            ctypes.c_void_p,
        ]
        data_dir = Path(espeakng_loader.get_data_path()).parent
        self.rate = lib.espeak_Initialize(_SYNCHRONOUS, 0, str(data_dir).encode(), 0)
        if self.rate <= 0:
            raise RuntimeError("eSpeak NG did not initialise")
        self._chunks: list[np.ndarray] = []
        self._callback = _CALLBACK(self._collect)  # kept alive with the object
        lib.espeak_SetSynthCallback(self._callback)
        self.lib = lib

    def _collect(self, wav, n, _events) -> int:
        if n > 0 and wav:
            self._chunks.append(np.ctypeslib.as_array(wav, shape=(n,)).copy())
        return 0

    def say(self, text: str, voice: str, wpm: int) -> np.ndarray:
        self._chunks = []
        # eSpeak has one global callback, and an in-process server's synthesizer sets its own
        self.lib.espeak_SetSynthCallback(self._callback)
        self.lib.espeak_SetVoiceByName(voice.encode())
        self.lib.espeak_SetParameter(_RATE_PARAM, wpm, 0)
        data = text.encode("utf-8") + b"\0"
        self.lib.espeak_Synth(data, len(data), 0, 0, 0, _CHARS_UTF8, None, None)
        self.lib.espeak_Synchronize()
        return np.concatenate(self._chunks) if self._chunks else np.zeros(0, np.int16)


@functools.cache
def _engine() -> _Espeak:
    return _Espeak()


@functools.cache
def speech(text: str, voice: str = "en-us", wpm: int = 170) -> tuple[np.ndarray, int]:
    """(int16 samples, rate) of `text` spoken by eSpeak NG.

    Synthesized in a fresh process: eSpeak's output depends on everything it has said before in
    the same process (a generator state that espeak_Initialize does not reset), so audio made
    in the test process depended on which tests, and which background speech, came first, and
    the transcription bounds flaked. The first utterance of a new process is always the same."""
    run = subprocess.run(
        [sys.executable, __file__, text, voice, str(wpm)],
        capture_output=True,
        check=True,
        timeout=60,
    )
    rate = int.from_bytes(run.stdout[:4], "little")
    samples = np.frombuffer(run.stdout[4:], dtype="<i2").astype(np.int16)
    samples.setflags(write=False)
    return samples, rate


def _say_to_stdout(text: str, voice: str, wpm: int) -> None:
    """`speech`'s child: the rate (4 bytes) then the int16 samples, on stdout."""
    engine = _engine()
    samples = engine.say(text, voice, wpm)
    sys.stdout.buffer.write(engine.rate.to_bytes(4, "little") + samples.astype("<i2").tobytes())


def silence(seconds: float, rate: int) -> np.ndarray:
    return np.zeros(int(seconds * rate), dtype=np.int16)


def utterances(texts, *, gap: float = 1.2, lead: float = 0.5, voice: str = "en-us"):
    """Sentences one after another with `gap` seconds of silence, int16 at eSpeak's rate."""
    parts = []
    rate = 22050
    for text in texts:
        samples, rate = speech(text, voice)
        parts += [silence(lead if not parts else gap, rate), samples]
    parts.append(silence(lead, rate))
    return np.concatenate(parts), rate


def wav_bytes(samples: np.ndarray, rate: int) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(np.asarray(samples, dtype="<i2").tobytes())
    return out.getvalue()


@functools.cache
def flac_silence(seconds: int, rate: int = 48000) -> bytes:
    """`seconds` of digital silence as FLAC, encoded ten seconds at a time (an hour is ~490 KB
    and never exists as samples): the decompression bomb of the hardening tests and bench."""
    import av

    out = io.BytesIO()
    with av.open(out, "w", format="flac") as container:
        stream = container.add_stream("flac", rate=rate)
        stream.layout = "mono"
        block = np.zeros((1, 10 * rate), np.int16)
        for _ in range(seconds // 10):
            frame = av.AudioFrame.from_ndarray(block, format="s16", layout="mono")
            frame.sample_rate = rate
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return out.getvalue()


def to_rate(samples: np.ndarray, src: int, dst: int) -> np.ndarray:
    """int16 resampled (for feeding the realtime API at 24 kHz)."""
    import soxr

    out = soxr.resample(samples.astype(np.float32) / 32768.0, src, dst)
    return (np.clip(out, -1, 1) * 32767).astype(np.int16)


# Whisper writes small numbers as digits ("at 7 in the morning"): the same word, not an error
_SPELLED = "zero one two three four five six seven eight nine ten eleven twelve"
_NUMBERS = _SPELLED.split()


def words(text: str) -> list[str]:
    """Lower-case words without punctuation, small numbers spelled out."""
    found = re.sub(r"[^a-z0-9' ]", " ", text.lower()).split()
    return [_NUMBERS[int(w)] if w.isdigit() and int(w) < len(_NUMBERS) else w for w in found]


def wer(reference: str, hypothesis: str) -> float:
    """Word error rate: word-level edit distance over the reference length."""
    ref, hyp = words(reference), words(hypothesis)
    row = list(range(len(hyp) + 1))
    for i in range(1, len(ref) + 1):
        diag, row[0] = row[0], i
        for j in range(1, len(hyp) + 1):
            cost = diag + (ref[i - 1] != hyp[j - 1])
            diag, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, cost)
    return row[len(hyp)] / max(1, len(ref))


def heard(sentence: int, text: str, bound: float = 0.5) -> bool:
    """`text` is recognisably `SENTENCES[sentence]`: nearer to it than to any other test
    sentence, and with at most `bound` of its words wrong.

    For the tests about where speech goes (which item, which stream, what a commit or a
    compaction keeps), not how well it is read: tiny.en's int8 reading of eSpeak's voice
    moves with the CPU's kernels (AVX2 and AVX-512 machines mishear different words of the
    same audio), so a tight bound there measured the CPU, not the behaviour. Accuracy has its
    own tests, on whole files, at tighter bounds."""
    scores = [wer(s, text) for s in SENTENCES]
    return scores[sentence] <= bound and scores[sentence] == min(scores)


if __name__ == "__main__":
    _say_to_stdout(sys.argv[1], sys.argv[2], int(sys.argv[3]))


HUMAN_DIR = Path("/usr/share/sounds/alsa")  # Debian's alsa-utils: a person saying each name


def human_clips() -> dict[str, tuple[np.ndarray, int]]:
    """Recordings of a real person (alsa-utils' speaker-test words: "Front Left", "Rear
    Center"...), name -> (int16 mono samples trimmed of silence, rate); empty when alsa-utils
    is not installed. GPL-2 like alsa-utils, read in place, never copied into the project."""

    clips: dict[str, tuple[np.ndarray, int]] = {}
    for path in sorted(HUMAN_DIR.glob("*.wav")) if HUMAN_DIR.is_dir() else []:
        if path.stem == "Noise":
            continue
        with wave.open(str(path)) as w:
            rate, channels = w.getframerate(), w.getnchannels()
            pcm = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16)
        if channels > 1:
            pcm = pcm.reshape(-1, channels).mean(axis=1).astype(np.int16)
        loud = np.nonzero(np.abs(pcm.astype(np.int32)) > 600)[0]
        if loud.size:
            pcm = pcm[max(0, loud[0] - rate // 50) : loud[-1] + rate // 50]
        clips[path.stem.replace("_", " ")] = (pcm, rate)
    return clips
