"""`semantic_vad` over `/v1/realtime` through the real server: Smart Turn (the real model),
eSpeak speech, transcription and conversation sessions, several sessions at once."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from audiokit import silence, speech, to_rate
from test_realtime_transcription import Client

MODEL_FIXTURES = {"live"}  # fixtures that load a model: users are slow

RATE = 24000
_COMPLETED = "conversation.item.input_audio_transcription.completed"


@pytest.fixture(scope="module")
def live():
    from serverkit import run_server

    with run_server(parallel=2) as server:
        yield server


@pytest.fixture(autouse=True)
def _smart_turn(smart_turn):
    """Every test here finds Smart Turn (see conftest)."""


def spoken(text: str) -> np.ndarray:
    pcm, rate = speech(text, "en-us")
    return to_rate(pcm, rate, RATE)


def paused_sentence() -> tuple[np.ndarray, float]:
    """ "I would like to know" · 700 ms · "the capital of France." · 4.5 s; where the pause ends."""
    first = np.concatenate([silence(0.5, RATE), spoken("I would like to know")])
    pause = silence(0.7, RATE)
    rest = np.concatenate([spoken("the capital of France."), silence(4.5, RATE)])
    return np.concatenate([first, pause, rest]), (first.size + pause.size) / RATE


def semantic(kind: str, eagerness: str = "auto", **extra) -> dict:
    td = {"type": "semantic_vad", "eagerness": eagerness, **extra}
    return {"type": kind, "audio": {"input": {"turn_detection": td}}}


def open_session(live, kind: str = "transcription", **td) -> tuple[Client, dict]:
    c = Client(live, "?intent=transcription" if kind == "transcription" else "")
    c.until("session.created")
    c.send("session.update", session=semantic(kind, **td))
    updated = c.until("session.updated")[-1]
    return c, updated["session"]["audio"]["input"]["turn_detection"]


def committed_and_transcripts(c: Client, count: int = 1) -> tuple[list[dict], list[str]]:
    events = c.until(_COMPLETED, count=count, timeout=120)
    commits = [e for e in events if e["type"] == "input_audio_buffer.committed"]
    return commits, [e["transcript"] for e in events if e["type"] == _COMPLETED]


def test_a_transcription_session_takes_semantic_vad_and_keeps_a_paused_sentence_whole(live):
    c, td = open_session(live, eagerness="high")
    try:
        assert td == {"type": "semantic_vad", "eagerness": "high"}
        audio, pause_end = paused_sentence()
        c.append(audio)
        commits, transcripts = committed_and_transcripts(c)
        assert len(commits) == 1 and commits[0]["audio_end_ms"] / 1000 > pause_end + 0.5
        text = transcripts[0].lower()
        assert "know" in text and "capital" in text, text
        kinds = [e["type"] for e in c.events]
        assert kinds.count("input_audio_buffer.speech_started") == 1
    finally:
        c.close()


def test_a_conversation_session_echoes_semantic_vad_with_its_settings(live):
    c, td = open_session(live, "realtime", eagerness="low", create_response=False)
    try:
        assert td == {
            "type": "semantic_vad",
            "eagerness": "low",
            "create_response": False,
            "interrupt_response": True,
        }
        c.send("session.update", session={"type": "realtime", "instructions": "Be brief."})
        td = c.until("session.updated")[-1]["session"]["audio"]["input"]["turn_detection"]
        assert td["type"] == "semantic_vad" and td["eagerness"] == "low"  # kept
        audio = np.concatenate([spoken("What is the capital of France?"), silence(1.0, RATE)])
        c.append(audio)
        commits, _ = committed_and_transcripts(c)
        assert len(commits) == 1
        assert not [e for e in c.events if e["type"] == "response.created"]  # create_response
    finally:
        c.close()


def test_several_sessions_each_get_their_own_turns(live):
    texts = ["What is the capital of France?", "Where is the nearest train station?"]
    results: dict[int, tuple[list[dict], list[str]]] = {}
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            c, _ = open_session(live, eagerness=("high", "auto")[i])
            try:
                # 4.5 s of silence after: past the 4 s bound even if judged unfinished
                audio = [silence(0.3, RATE), spoken(texts[i]), silence(4.5, RATE)]
                c.append(np.concatenate(audio))
                results[i] = committed_and_transcripts(c)
            finally:
                c.close()
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    for i, key in enumerate(("capital", "station")):
        commits, transcripts = results[i]
        assert len(commits) == 1
        assert key in transcripts[0].lower(), transcripts
        other = ("station", "capital")[i]
        assert other not in transcripts[0].lower()


def test_without_smart_turn_semantic_vad_is_an_error_event_and_the_session_goes_on(
    live, monkeypatch, tmp_path
):
    monkeypatch.setenv("LLAMACTL_SMART_TURN_MODEL", str(tmp_path / "absent.onnx"))
    c = Client(live)
    try:
        c.until("session.created")
        c.send("session.update", session=semantic("transcription"))
        error = c.until("error")[-1]["error"]
        assert error["code"] == "model_not_found"
        assert error["param"] == "session.audio.input.turn_detection.type"
        assert "Smart Turn" in error["message"]
        c.send(
            "session.update",
            session={"type": "transcription", "audio": {"input": {"turn_detection": None}}},
        )
        updated = c.until("session.updated")[-1]
        assert updated["session"]["audio"]["input"]["turn_detection"] is None
        c.append(np.concatenate([spoken("What is the capital of France?"), silence(0.3, RATE)]))
        c.send("input_audio_buffer.commit")
        _, transcripts = committed_and_transcripts(c)
        assert "capital" in transcripts[0].lower()
    finally:
        c.close()
