"""Answers started during the silence that ends a voice turn (server/openai/realtime/
speculation.py), on the real server: SmolLM2 answers, Whisper tiny.en hears, eSpeak speaks.

With greedy sampling an answer started ahead of its turn is the answer the turn would get:
it equals the answer to the same words typed, alone and with other sessions speaking at once;
a speaker who goes on after a pause gets the answer to the whole sentence.
"""

from __future__ import annotations

import base64
import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
from audiokit import silence, speech, to_rate
from websockets.sync.client import connect

MODEL_FIXTURES = {"live"}
RATE = 24000
BLOCK = RATE // 20  # 50 ms, as a microphone sends


@pytest.fixture(scope="module")
def live():
    from serverkit import run_server

    with run_server(parallel=4, temperature=0.0, metrics=True) as server:
        yield server


def spoken(*parts: str | float) -> np.ndarray:
    out = [silence(0.3, RATE)]
    for part in parts:
        if isinstance(part, str):
            pcm, rate = speech(part, "en-us")
            out.append(to_rate(pcm, rate, RATE))
        else:
            out.append(silence(part, RATE))
    return np.concatenate(out)


class Session:
    def __init__(self, live, turn_detection: dict[str, Any] | None) -> None:
        url = live.url.replace("http://", "ws://") + "/v1/realtime"
        self._conn = connect(url, open_timeout=30, max_size=None)
        self.ws = self._conn.__enter__()
        self.until("session.created")
        session: dict[str, Any] = {
            "type": "realtime",
            "output_modalities": ["text"],
            "max_output_tokens": 24,
            "instructions": "Answer in one short sentence.",
        }
        session["audio"] = {"input": {"turn_detection": turn_detection}}
        self.send("session.update", session=session)
        self.until("session.updated")

    def send(self, type_: str, **fields: Any) -> None:
        self.ws.send(json.dumps({"type": type_, **fields}))

    def until(self, type_: str, timeout: float = 120) -> list[dict[str, Any]]:
        seen = []
        deadline = time.monotonic() + timeout
        while True:
            event = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            assert event["type"] != "error", event
            seen.append(event)
            if event["type"] == type_:
                return seen

    def speak(self, audio: np.ndarray, trailing_s: float = 3.0) -> None:
        """In real time, as a microphone would, then silence until the turn has ended."""
        audio = np.concatenate([audio, silence(trailing_s, RATE)])
        t0 = time.perf_counter()
        for i in range(0, audio.size, BLOCK):
            chunk = base64.b64encode(audio[i : i + BLOCK].astype("<i2").tobytes()).decode()
            self.send("input_audio_buffer.append", audio=chunk)
            time.sleep(max(0.0, t0 + (i + BLOCK) / RATE - time.perf_counter()))

    def close(self) -> None:
        self._conn.__exit__(None, None, None)


def voice_turn(live, audio: np.ndarray, mode: dict[str, Any]) -> tuple[str, str, dict]:
    """(what was heard, the answer, the response's metadata) of one spoken turn."""
    s = Session(live, mode)
    try:
        s.speak(audio)
        events = s.until("response.done")
    finally:
        s.close()
    heard = [
        e["transcript"]
        for e in events
        if e["type"] == "conversation.item.input_audio_transcription.completed"
    ]
    done = events[-1]["response"]
    answer = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    return heard[-1], answer, done.get("metadata") or {}


def typed_turn(live, text: str) -> str:
    s = Session(live, None)
    try:
        s.send(
            "conversation.item.create",
            item={
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": text}],
            },
        )
        s.send("response.create")
        events = s.until("response.done")
    finally:
        s.close()
    return "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")


SERVER_VAD = {"type": "server_vad", "silence_duration_ms": 500}
SEMANTIC = {"type": "semantic_vad", "eagerness": "auto"}


@pytest.mark.parametrize("mode", [SERVER_VAD, SEMANTIC], ids=["server", "semantic"])
def test_an_answer_started_in_the_silence_is_the_answer_to_the_words(live, mode) -> None:
    heard, answer, meta = voice_turn(live, spoken("What is the capital of France?"), mode)
    assert meta.get("speculated") == "true", meta  # started before the turn ended
    assert answer and answer == typed_turn(live, heard)


def test_a_speaker_who_goes_on_gets_the_answer_to_the_whole_sentence(live) -> None:
    audio = spoken("I would like to know", 0.7, "the capital of France.")
    heard, answer, _ = voice_turn(live, audio, {"type": "server_vad", "silence_duration_ms": 900})
    assert "capital" in heard.lower(), heard  # the whole sentence, not its first part
    assert answer == typed_turn(live, heard)


def test_sessions_speaking_at_once_each_get_their_own_answer(live) -> None:
    questions = [
        "What is the capital of France?",
        "Where is the nearest train station?",
        "What time is it in London?",
    ]
    alone = [voice_turn(live, spoken(q), SERVER_VAD) for q in questions]
    with ThreadPoolExecutor(len(questions)) as pool:
        together = list(pool.map(lambda q: voice_turn(live, spoken(q), SERVER_VAD), questions))
    for (heard_alone, answer_alone, _), (heard, answer, _) in zip(alone, together, strict=True):
        if heard != heard_alone:  # Whisper's reading of the same audio is deterministic
            pytest.fail(f"heard {heard!r} alone, {heard_alone!r} together")
        assert answer == answer_alone


def _voice_metrics(live) -> dict[str, float]:
    import httpx

    rows = {}
    for line in httpx.get(live.url + "/metrics", timeout=10).text.splitlines():
        if line.startswith("llamactl:voice_"):
            name, _, value = line.rpartition(" ")
            rows[name] = float(value)
    return rows


def test_under_chat_load_a_voice_turn_still_gets_its_answer_and_the_stages_are_counted(
    live,
) -> None:
    """With chat streams decoding all along, the turn's readings go first (the decode loop
    pauses for them) and the answer is still the one it gets alone; /metrics shows each
    stage's waits and compute and the decode time given to speech."""
    import threading

    import httpx

    question = spoken("Where is the nearest train station?")
    heard_alone, alone, _ = voice_turn(live, question, SERVER_VAD)
    before = _voice_metrics(live)
    stop = threading.Event()

    def chat() -> None:
        body = {
            "messages": [{"role": "user", "content": "Write a long story about a lighthouse."}],
            "max_tokens": 300,
            "stream": True,
        }
        while not stop.is_set():
            with httpx.stream("POST", live.v1 + "/chat/completions", json=body, timeout=120) as r:
                for _ in r.iter_lines():
                    if stop.is_set():
                        return

    streams = [threading.Thread(target=chat) for _ in range(3)]
    for t in streams:
        t.start()
    try:
        time.sleep(1.0)
        heard, answer, _ = voice_turn(live, question, SERVER_VAD)
    finally:
        stop.set()
        for t in streams:
            t.join()
    after = _voice_metrics(live)
    assert heard == heard_alone and answer == alone
    for stage in ("asr_ahead", "llm_first_text"):
        key = f'llamactl:voice_stage_seconds_count{{stage="{stage}"}}'
        assert after.get(key, 0) > before.get(key, 0), (stage, after)
    assert 'llamactl:voice_stage_wait_seconds_sum{stage="asr_ahead"}' in after
    paused = "llamactl:voice_llm_paused_seconds_total"
    assert after[paused] > before.get(paused, 0.0)  # the chats gave the turn its time
