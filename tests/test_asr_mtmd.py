"""llama.cpp's own speech input, for real: a tiny converted chat model with a Qwen2-Audio style
hearing projector (`fixture_ggufs.build_audio_mmproj`), loaded by mtmd and read by
`MtmdTranscriber` through every transcription path.

The weights are random, so the transcript is noise; what is checked is the path (mtmd hears
the audio, the model writes text, the loop guard stops its repetition), the same audio giving
the same text (greedy), and the events of each API, with requests side by side.
"""

from __future__ import annotations

import base64
import io
import json
import threading
import wave
from pathlib import Path

import httpx
import numpy as np
import pytest
from audiokit import SENTENCES, speech, to_rate
from fixture_ggufs import build_audio_mmproj
from typer.testing import CliRunner

from llamactl.cli.main import app
from llamactl.engine.audio.load import load_transcriber
from llamactl.engine.audio.mtmd import MAX_TOKENS, MtmdTranscriber

pytestmark = pytest.mark.slow  # every test loads the model in llama.cpp


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(chat model, its hearing mmproj), side by side as users keep them."""
    from llamactl.converters import convert
    from llamactl.converters.examples import HIDDEN
    from synthetic_checkpoints import cached

    root = tmp_path_factory.mktemp("asr")
    model = convert(cached(tmp_path_factory, "llama"), root / "hears.gguf").outfile
    mmproj = build_audio_mmproj(root / "mmproj-hears.gguf", text_hidden=HIDDEN)
    return model, mmproj


@pytest.fixture(scope="module")
def transcriber(pair):
    t = load_transcriber(pair[0], threads=2)  # finds the mmproj beside the model
    yield t
    t.close()


def _speech16(i: int) -> np.ndarray:
    pcm, rate = speech(SENTENCES[i], "en-us")
    return to_rate(pcm, rate, 16000)


def _wav(pcm: np.ndarray, rate: int = 16000) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.astype("<i2").tobytes())
    return buf.getvalue()


def test_mtmd_hears_and_the_model_writes(transcriber):
    assert isinstance(transcriber, MtmdTranscriber) and transcriber.projector == "qwen2a"
    audio = _speech16(0).astype(np.float32) / 32768
    read = transcriber.transcribe_window(audio)
    assert read.text  # noise, but text the model wrote after hearing the audio
    assert read.tokens < MAX_TOKENS  # the loop guard ended the model's repetition
    assert transcriber.transcribe_window(audio).text == read.text  # greedy: the same again
    other = transcriber.transcribe_window(_speech16(1).astype(np.float32) / 32768)
    assert other.tokens > 0


def test_a_recording_is_read_region_by_region(transcriber):
    pcm = np.concatenate([_speech16(0), np.zeros(16000, np.int16), _speech16(1)])
    segments = transcriber.transcribe(pcm, 16000)
    assert len(segments) == 2 and segments[0].end < segments[1].start


def test_cli_transcribes_with_the_model(tmp_path, pair):
    wav = tmp_path / "say.wav"
    wav.write_bytes(_wav(_speech16(0)))
    result = CliRunner().invoke(app, ["transcribe", str(wav), "--model", str(pair[0]), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["text"]


def test_transcriptions_endpoint_and_realtime_read_with_the_model(pair):
    from serverkit import run_server

    model, mmproj = pair
    with run_server(parallel=1, transcribe_model=str(model), transcribe_mmproj=str(mmproj)) as live:
        files = {"file": ("say.wav", _wav(_speech16(0)), "audio/wav")}
        first = httpx.post(
            live.v1 + "/audio/transcriptions", files=files, data={"model": "hears"}, timeout=120
        )
        assert first.status_code == 200, first.text
        alone = first.json()["text"]
        assert alone

        texts: list[str] = []

        def ask() -> None:
            r = httpx.post(
                live.v1 + "/audio/transcriptions", files=files, data={"model": "hears"}, timeout=180
            )
            texts.append(r.json()["text"])

        threads = [threading.Thread(target=ask) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(180)
        assert texts == [alone] * 3  # side by side, each reads as alone

        transcript = _realtime_transcript(live.url, _speech16(0))
        assert transcript["type"] == "conversation.item.input_audio_transcription.completed"
        assert transcript["transcript"]


def _realtime_transcript(url: str, pcm16: np.ndarray) -> dict:
    """A transcription session: the audio at 24 kHz, committed; the completed event."""
    from websockets.sync.client import connect

    pcm = to_rate(pcm16, 16000, 24000)
    with connect(url.replace("http://", "ws://") + "/v1/realtime?intent=transcription") as ws:
        seen: list[str] = []
        while json.loads(ws.recv(timeout=60))["type"] != "session.created":
            pass
        for i in range(0, pcm.size, 4800):
            chunk = base64.b64encode(pcm[i : i + 4800].astype("<i2").tobytes()).decode()
            ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": chunk}))
        ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
        while True:
            event = json.loads(ws.recv(timeout=120))
            seen.append(event["type"])
            if event["type"] in ("conversation.item.input_audio_transcription.completed", "error"):
                assert "input_audio_buffer.committed" in seen
                return event
