"""Piper's neural voice (`en_US-joe-medium`, installed from PyPI as a dependency) on every
front end, through the real ONNX model and the real transcriber: what it says is heard back.

VITS draws noise for pitch and timing, so samples are not compared byte for byte; what a user
relies on is that the words come out, at a plausible length, alone or side by side.
"""

from __future__ import annotations

import base64
import io
import os
import subprocess
import sys
import time
import wave
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest
from audiokit import wav_bytes, wer
from test_realtime_transcription import Client

from llamactl import open_synthesizer
from llamactl.engine.audio.synth_espeak import Clause, _clause_ending
from llamactl.engine.audio.synth_piper import PiperSynthesizer, sentences
from llamactl.engine.audio.synth_piper_voices import installed_voices, read_voice

MODEL_FIXTURES = {"server"}
SENTENCE = "The quick brown fox jumps over the lazy dog."


def _wav(data: bytes) -> tuple[np.ndarray, int]:
    with wave.open(io.BytesIO(data)) as w:
        return np.frombuffer(w.readframes(w.getnframes()), "<i2"), w.getframerate()


def _heard(server, wav: bytes) -> str:
    r = httpx.post(
        server.v1 + "/audio/transcriptions",
        files={"file": ("speech.wav", wav, "audio/wav")},
        data={"model": "whisper-1"},
        timeout=120,
    )
    assert r.status_code == 200, r.text
    return r.json()["text"]


def test_the_piper_voice_installs_with_llamactl() -> None:
    names = [v.name for v in installed_voices()]
    assert "en_US-joe-medium" in names
    listed = {v.name: v for v in open_synthesizer().voices()}
    assert "Piper" in listed["en_US-joe-medium"].description
    assert "en-us" in listed  # eSpeak's voices are still there


def test_tts_speaks_with_joe_and_the_words_are_heard(server) -> None:
    r = httpx.post(server.url + "/tts", json={"input": SENTENCE, "voice": "joe"}, timeout=60)
    assert r.status_code == 200, r.text
    pcm, rate = _wav(r.content)
    assert rate == 22050
    assert 1.5 < pcm.size / rate < 5.0
    assert wer(SENTENCE, _heard(server, r.content)) <= 0.2


def test_openai_speech_takes_the_long_name_and_speed(server) -> None:
    lengths = {}
    for speed in (1.0, 1.5):
        r = httpx.post(
            server.v1 + "/audio/speech",
            json={
                "model": "tts-1",
                "input": SENTENCE,
                "voice": "en_US-joe-medium",
                "speed": speed,
                "response_format": "wav",
            },
            timeout=60,
        )
        assert r.status_code == 200, r.text
        pcm, rate = _wav(r.content)
        lengths[speed] = pcm.size / rate
    assert lengths[1.5] < lengths[1.0] * 0.8  # faster speech is shorter


def test_piper_requests_side_by_side_all_speak(server) -> None:
    texts = [SENTENCE, "Please open the window before you leave.", "Seven green apples."]

    def say(text: str) -> bytes:
        r = httpx.post(server.url + "/tts", json={"input": text, "voice": "joe"}, timeout=120)
        assert r.status_code == 200, r.text
        return r.content

    alone = [_wav(say(t))[0].size for t in texts]
    with ThreadPoolExecutor(len(texts) * 2) as pool:
        together = list(pool.map(say, texts * 2))
    for i, wav in enumerate(together):
        pcm, _ = _wav(wav)
        # the noise moves timing a little, never the words
        assert abs(pcm.size - alone[i % 3]) < 0.25 * alone[i % 3]
    for i, wav in enumerate(together[:3]):
        assert wer(texts[i], _heard(server, wav)) <= 0.34, i


def test_a_realtime_session_answers_in_the_piper_voice(server) -> None:
    c = Client(server, "")
    try:
        c.until("session.created")
        c.send(
            "session.update",
            session={
                "type": "realtime",
                "max_output_tokens": 24,
                "audio": {"output": {"voice": "joe"}},
            },
        )
        updated = c.until("session.updated")[-1]
        assert updated["session"]["audio"]["output"]["voice"] == "joe"
        c.send(
            "conversation.item.create",
            item={
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "Say hello to my friend Sam."}],
            },
        )
        c.send("response.create")
        events = c.until("response.done", timeout=120)
    finally:
        c.close()
    audio = b"".join(
        base64.b64decode(e["delta"]) for e in events if e["type"] == "response.output_audio.delta"
    )
    transcript = "".join(
        e["delta"] for e in events if e["type"] == "response.output_audio_transcript.delta"
    )
    pcm = np.frombuffer(audio, "<i2")
    assert pcm.size > 24000 * 0.5
    assert wer(transcript, _heard(server, wav_bytes(pcm, 24000))) <= 0.5, transcript


def test_closing_the_stream_stops_before_the_next_sentence() -> None:
    synth = PiperSynthesizer()
    chunks = synth.synthesize(" ".join([SENTENCE] * 20), voice="joe")
    first = next(chunks)
    assert first.size > 0
    started = time.monotonic()
    chunks.close()
    assert time.monotonic() - started < 1.0


def test_cli_tts_with_the_piper_voice(tmp_path: Path) -> None:
    out = tmp_path / "joe.wav"
    done = subprocess.run(
        [sys.executable, "-m", "llamactl", "tts", SENTENCE, "--voice", "joe", "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    pcm, rate = _wav(out.read_bytes())
    assert rate == 22050 and pcm.size > rate
    listed = subprocess.run(
        [sys.executable, "-m", "llamactl", "tts", "--list-voices"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "en_US-joe-medium" in listed.stdout


@pytest.mark.parametrize(
    "voice", ["joe+f3", "joe/../../etc/passwd", "en_US-joe-medium.onnx", "x" * 200, "JOE\x00"]
)
def test_names_near_the_piper_voice_are_refused(server, voice: str) -> None:
    r = httpx.post(server.url + "/tts", json={"input": "Hi.", "voice": voice}, timeout=30)
    assert r.status_code == 400, r.text
    assert "voice" in r.json()["error"]["message"]


# --- the text side: eSpeak's clauses, Piper's sentences --------------------------------------


@pytest.mark.parametrize(
    ("read", "ending"),
    [
        (b"Hello there! I", "!"),  # eSpeak reads into the next word
        (b" am a small, l", ","),
        (b"today? F", "?"),
        (b"Fine.", "."),
        (b"pi is 3.14 or so", ""),  # a point inside a number ends nothing
        (b"no punctuation", ""),
        (b"", ""),
    ],
)
def test_the_ending_of_a_clause(read: bytes, ending: str) -> None:
    assert _clause_ending(read) == ending


def test_clauses_become_sentences_and_long_ones_are_cut() -> None:
    clauses = [Clause("a", ","), Clause("b", "."), Clause("c", "?"), Clause("d", "")]
    assert sentences(clauses) == ["a, b.", "c?", "d"]
    # a long first sentence speaks its first clause alone (sooner first audio); later ones
    # keep their clauses together
    long_first = [Clause("a" * 70, ","), Clause("b", "."), Clause("c" * 70, ","), Clause("d", ".")]
    assert sentences(long_first) == ["a" * 70 + ",", "b.", "c" * 70 + ", d."]
    long = sentences([Clause(" ".join(["wɜːd"] * 300), ".")])
    assert len(long) > 1 and all(len(s) <= 400 for s in long)
    assert sentences([Clause("", "")]) == []


# --- hostile voice configs: what `read_voice` refuses ------------------------------------------


def _config(tmp_path: Path, body: bytes, name: str = "en_US-test-medium") -> Path:
    (tmp_path / f"{name}.onnx").write_bytes(b"not read here")
    path = tmp_path / f"{name}.onnx.json"
    path.write_bytes(body)
    return path


GOOD = (
    b'{"audio": {"sample_rate": 22050}, "espeak": {"voice": "en-us"},'
    b' "phoneme_id_map": {"^": [1], "_": [0], "$": [2], "a": [14]}}'
)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"x" * ((1 << 20) + 1), "larger than"),
        (b'{"audio": {"sample_rate": 22', "JSONDecodeError"),
        (b"[" * 100_000 + b"]" * 100_000, "RecursionError|too deep|AttributeError"),
        (b'{"audio": 5}', "Error"),
        (GOOD.replace(b'"$": [2], ', b""), "lacks"),
        (GOOD[:-1] + b', "phoneme_type": "text"}', "not eSpeak"),
        (b"\xff\xfe\x00", "Error"),
    ],
    ids=["huge", "truncated", "deep", "wrong-type", "no-end-id", "not-espeak", "not-utf8"],
)
def test_a_bad_voice_config_is_refused(tmp_path: Path, body: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        read_voice(_config(tmp_path, body))


def test_a_good_voice_config_is_read(tmp_path: Path) -> None:
    voice = read_voice(_config(tmp_path, GOOD))
    assert (voice.name, voice.speaker, voice.sample_rate) == ("en_US-test-medium", "test", 22050)


@pytest.mark.parametrize("name", ["../../etc/passwd", "en_US-test", "x", "en_US-a-b-medium.x"])
def test_a_file_not_named_like_a_voice_is_refused(tmp_path: Path, name: str) -> None:
    path = tmp_path / "c.onnx.json"
    path.write_bytes(GOOD)
    with pytest.raises(ValueError, match="not a Piper voice name"):
        read_voice(path.with_name(name.replace("/", "_") + ".onnx.json"))


def test_a_fifo_or_a_directory_is_not_read(tmp_path: Path) -> None:
    (tmp_path / "en_US-fifo-medium.onnx").write_bytes(b"")
    fifo = tmp_path / "en_US-fifo-medium.onnx.json"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="not a regular file"):
        read_voice(fifo)  # returns at once: opening a FIFO would wait for a writer
    folder = tmp_path / "en_US-dir-medium.onnx.json"
    folder.mkdir()
    (tmp_path / "en_US-dir-medium.onnx").write_bytes(b"")
    with pytest.raises(ValueError, match="not a regular file"):
        read_voice(folder)


def test_a_missing_model_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "en_US-alone-medium.onnx.json"
    path.write_bytes(GOOD)
    with pytest.raises(ValueError, match="missing"):
        read_voice(path)
