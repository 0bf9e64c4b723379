"""`/v1/realtime` transcription sessions against a live server: the `websockets` client and
the official OpenAI SDK's realtime client."""

from __future__ import annotations

import base64
import json
import threading
import time
from typing import Any

import numpy as np
import openai
import pytest
from audiokit import SENTENCES, heard, silence, speech, to_rate
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from llamactl.realtime import protocol

MODEL_FIXTURES = {"live"}  # fixtures that load a model: users are slow

VOICE = "en-us+f2"
RATE = 24000


@pytest.fixture(scope="module")
def live():
    from serverkit import run_server

    with run_server(parallel=1) as server:
        yield server


def pcm24(i: int) -> np.ndarray:
    pcm, rate = speech(SENTENCES[i], VOICE)
    return to_rate(pcm, rate, RATE)


class Client:
    """A realtime transcription session over the `websockets` sync client."""

    def __init__(self, live, query: str = "?intent=transcription", **kwargs: Any) -> None:
        url = live.url.replace("http://", "ws://") + "/v1/realtime" + query
        self._connection = connect(url, open_timeout=30, **kwargs)
        self.ws = self._connection.__enter__()
        self.events: list[dict[str, Any]] = []

    def send(self, type_: str, **fields: Any) -> None:
        self.ws.send(json.dumps({"type": type_, **fields}))

    def append(self, pcm: np.ndarray, chunk: int = RATE // 5) -> None:
        for i in range(0, pcm.size, chunk):
            audio = base64.b64encode(pcm[i : i + chunk].astype("<i2").tobytes()).decode()
            self.send("input_audio_buffer.append", audio=audio)

    def recv(self, timeout: float = 60) -> dict[str, Any]:
        event = json.loads(self.ws.recv(timeout=timeout))
        protocol.check_server_event(event)  # every event the server sends is the protocol's
        self.events.append(event)
        return event

    def until(self, type_: str, count: int = 1, timeout: float = 60) -> list[dict[str, Any]]:
        """Events received until the `count`-th event of `type_` (inclusive)."""
        seen: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        while sum(e["type"] == type_ for e in seen) < count:
            seen.append(self.recv(max(0.1, deadline - time.monotonic())))
        return seen

    def close(self) -> None:
        self._connection.__exit__(None, None, None)


@pytest.fixture
def client(live):
    c = Client(live)
    c.until("session.created")
    yield c
    c.close()


def _transcripts(events) -> list[str]:
    return [
        e["transcript"]
        for e in events
        if e["type"] == "conversation.item.input_audio_transcription.completed"
    ]


def test_session_created_and_updated(live):
    c = Client(live)
    created = c.recv()
    assert created["type"] == "session.created" and created["event_id"].startswith("event_")
    session = created["session"]
    assert session["type"] == "transcription" and session["id"].startswith("sess_")
    audio_in = session["audio"]["input"]
    assert audio_in["format"] == {"type": "audio/pcm", "rate": 24000}
    assert audio_in["transcription"]["model"] == "whisper-tiny.en"
    assert audio_in["turn_detection"] is None
    c.send(
        "session.update",
        session={
            "type": "transcription",
            "audio": {
                "input": {
                    "format": {"type": "audio/pcm", "rate": 16000},
                    "transcription": {"model": "gpt-4o-transcribe", "language": "en"},
                    "noise_reduction": {"type": "near_field"},
                }
            },
        },
    )
    updated = c.recv()
    assert updated["type"] == "session.updated"
    audio_in = updated["session"]["audio"]["input"]
    assert audio_in["format"]["rate"] == 16000 and audio_in["transcription"]["language"] == "en"
    assert audio_in["noise_reduction"] is None  # accepted, not in effect: reported as such
    pcm, rate = speech(SENTENCES[3], VOICE)
    try:
        c.append(to_rate(pcm, rate, 16000))
        c.send("input_audio_buffer.commit")
        # This test is about the new rate taking effect: the words came through
        assert heard(3, _transcripts(c.until(_COMPLETED))[0])
    finally:
        c.close()  # a failure must not leave the session open for the tests after it


_COMPLETED = "conversation.item.input_audio_transcription.completed"
_DELTA = "conversation.item.input_audio_transcription.delta"


def test_appends_before_session_created_are_refused(live, monkeypatch):
    from llamactl.server.openai.realtime.transcription import TranscriptionSession

    original = TranscriptionSession._open_stream

    def slow_open(self):
        time.sleep(0.5)  # the stream is still being set up
        return original(self)

    monkeypatch.setattr(TranscriptionSession, "_open_stream", slow_open)
    c = Client(live)
    c.append(pcm24(0)[:RATE])
    first = c.recv()
    assert first["type"] == "error" and first["error"]["code"] == "session_not_ready"
    c.until("session.created")
    c.append(pcm24(0))  # the socket stays usable
    c.send("input_audio_buffer.commit")
    assert heard(0, _transcripts(c.until(_COMPLETED))[0])
    c.close()


def test_commit_order_ids_and_previous_item_chain(client):
    client.append(pcm24(0))
    client.send("input_audio_buffer.commit")
    client.append(pcm24(1))  # appended after the commit: the next item
    client.send("input_audio_buffer.commit")
    client.send("input_audio_buffer.commit")  # back to back: a third, empty item
    events = client.until(_COMPLETED, 3)
    committed = [e for e in events if e["type"] == "input_audio_buffer.committed"]
    ids = [e["item_id"] for e in committed]
    assert len(ids) == 3 == len(set(ids)) and all(i.startswith("item_") for i in ids)
    assert [e["previous_item_id"] for e in committed] == [None, ids[0], ids[1]]
    for item in ids:  # committed first, then the item's deltas, then its completion
        mine = [i for i, e in enumerate(events) if e.get("item_id") == item]
        assert events[mine[0]]["type"] == "input_audio_buffer.committed"
        assert events[mine[-1]]["type"] == _COMPLETED
        deltas = "".join(events[i]["delta"] for i in mine if events[i]["type"] == _DELTA)
        assert deltas == events[mine[-1]]["transcript"]
    done = {e["item_id"]: e for e in events if e["type"] == _COMPLETED}
    assert heard(0, done[ids[0]]["transcript"])
    assert heard(1, done[ids[1]]["transcript"])
    assert done[ids[2]]["transcript"] == ""
    assert done[ids[0]]["usage"]["type"] == "duration"
    event_ids = [e["event_id"] for e in client.events]
    assert len(event_ids) == len(set(event_ids))


def test_server_vad_commits_each_utterance(client):
    client.send(
        "session.update",
        session={"type": "transcription", "audio": {"input": {"turn_detection": {}}}},
    )
    updated = client.until("session.updated")[-1]
    vad = updated["session"]["audio"]["input"]["turn_detection"]
    assert vad == {
        "type": "server_vad",
        "threshold": 0.5,
        "prefix_padding_ms": 300,
        "silence_duration_ms": 500,
    }
    gap = silence(1.0, RATE)
    client.append(np.concatenate([gap, pcm24(2), gap, pcm24(4), gap]))
    events = client.until(_COMPLETED, 2)
    kinds = [e["type"] for e in events if e["type"].startswith("input_audio_buffer")]
    assert (
        kinds
        == [
            "input_audio_buffer.speech_started",
            "input_audio_buffer.speech_stopped",
            "input_audio_buffer.committed",
        ]
        * 2
    )
    started = [e for e in events if e["type"] == "input_audio_buffer.speech_started"]
    committed = [e for e in events if e["type"] == "input_audio_buffer.committed"]
    assert [e["item_id"] for e in started] == [e["item_id"] for e in committed]
    assert 600 < started[0]["audio_start_ms"] < 1000  # 1 s of silence, less the padding
    texts = _transcripts(events)
    assert heard(2, texts[0]) and heard(4, texts[1])


def test_clear_drops_the_uncommitted_audio(client):
    client.append(pcm24(0))
    client.send("input_audio_buffer.clear")
    client.append(pcm24(3))
    client.send("input_audio_buffer.commit")
    events = client.until(_COMPLETED)
    assert "input_audio_buffer.cleared" in [e["type"] for e in events]
    (text,) = _transcripts(events)
    assert heard(3, text) and "park" not in text.lower()


def test_four_concurrent_sessions_keep_their_own_transcripts(live):
    results: dict[int, str] = {}
    errors: list[BaseException] = []

    def run(sentence: int) -> None:
        try:
            c = Client(live)
            c.until("session.created")
            c.append(pcm24(sentence), chunk=RATE // 10)
            c.send("input_audio_buffer.commit")
            results[sentence] = _transcripts(c.until(_COMPLETED, timeout=120))[0]
            c.close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in (0, 1, 2, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert not errors, errors
    for sentence, text in results.items():
        assert heard(sentence, text), (sentence, text)
    assert len(results) == 4


def test_abrupt_disconnect_frees_the_session(live):
    c = Client(live)
    c.until("session.created")
    service = live.state.transcription.current
    assert service.live_streams >= 1
    c.append(pcm24(0)[: RATE * 2])
    c.ws.socket.close()  # no close frame: the client just vanishes
    deadline = time.monotonic() + 10
    while service.live_streams and time.monotonic() < deadline:
        time.sleep(0.05)
    assert service.live_streams == 0


def test_protocol_errors_leave_the_socket_usable(client):
    client.ws.send("{not json")
    client.send("response.create")
    client.send("input_audio_buffer.append", audio="***", event_id="evt_1")
    bad_rate = {"type": "transcription", "audio": {"input": {"format": {"rate": 1000}}}}
    client.send("session.update", session=bad_rate)
    semantic = {"audio": {"input": {"turn_detection": {"type": "smart_vad"}}}}
    client.send("session.update", session=semantic)
    errors = [client.recv() for _ in range(5)]
    assert [e["type"] for e in errors] == ["error"] * 5
    codes = [e["error"]["code"] for e in errors]
    assert codes[:2] == ["invalid_json", "unknown_event"]
    assert errors[2]["error"]["event_id"] == "evt_1" and errors[2]["error"]["param"] == "audio"
    assert errors[3]["error"]["param"] == "session.audio.input.format.rate"
    assert "smart_vad" in errors[4]["error"]["message"]
    client.send("input_audio_buffer.commit")
    assert client.until(_COMPLETED)[-1]["transcript"] == ""


def test_without_intent_the_session_is_a_conversation(live):
    c = Client(live, query="")
    created = c.recv()
    assert created["type"] == "session.created" and created["session"]["type"] == "realtime"
    c.send("session.update", session={"type": "transcription"})
    refusal = c.recv()
    assert refusal["type"] == "error" and refusal["error"]["param"] == "session.type"
    c.close()


@pytest.mark.slow
def test_api_key_is_checked_at_the_handshake():
    from serverkit import run_server

    with run_server(parallel=1, api_key=["sesame"]) as keyed:
        with pytest.raises(InvalidStatus) as refused:
            Client(keyed)
        response = refused.value.response
        assert response.status_code == 401
        assert json.loads(response.body)["error"]["type"] == "authentication_error"
        c = Client(keyed, additional_headers={"Authorization": "Bearer sesame"})
        assert c.recv()["type"] == "session.created"
        c.close()
        c = Client(keyed, additional_headers={"X-Api-Key": "sesame"})
        assert c.recv()["type"] == "session.created"
        c.close()


def test_openai_sdk_realtime_client(live):
    client = openai.OpenAI(base_url=live.v1, api_key="unused")
    with client.realtime.connect(extra_query={"intent": "transcription"}) as conn:
        created = conn.recv()
        assert created.type == "session.created" and created.session.type == "transcription"
        audio = pcm24(4)
        for i in range(0, audio.size, RATE // 2):
            chunk = base64.b64encode(audio[i : i + RATE // 2].astype("<i2").tobytes()).decode()
            conn.input_audio_buffer.append(audio=chunk)
        conn.input_audio_buffer.commit()
        events = []
        while not events or events[-1].type != _COMPLETED:
            events.append(conn.recv())
    assert events[0].type == "input_audio_buffer.committed"
    assert events[0].previous_item_id is None
    assert heard(4, events[-1].transcript)
    assert events[-1].item_id == events[0].item_id
