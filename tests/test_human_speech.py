"""Voice on human speech, not only eSpeak: a person's recordings (Debian's alsa-utils,
`audiokit.human_clips`) through the real transcriber and a realtime turn on the real server.
Smart Turn's verdicts on them are figures for bench/voice.py, not asserted here."""

from __future__ import annotations

import numpy as np
import pytest
from audiokit import human_clips, silence, to_rate
from test_realtime_transcription import Client

MODEL_FIXTURES = {"live"}
RATE = 24000
CLIPS = human_clips()
pytestmark = pytest.mark.skipif(
    not CLIPS, reason="no human speech: apt-get install alsa-utils (install-system-deps --test)"
)


@pytest.fixture(scope="module")
def live():
    from serverkit import run_server

    with run_server(parallel=2) as server:
        yield server


# what Whisper tiny.en makes of each (measured): "Rear Right" is heard as "we're right."
HEARD = {"Front Left": ("front", "left"), "Rear Right": ("right",), "Side Left": ("side", "left")}


@pytest.mark.parametrize("name", HEARD)
def test_a_persons_words_are_transcribed(live, name: str) -> None:
    pcm, rate = CLIPS[name]
    c = Client(live, "?intent=transcription")
    try:
        c.until("session.created")  # a transcription session commits when told to
        c.append(np.concatenate([silence(0.3, RATE), to_rate(pcm, rate, RATE), silence(0.5, RATE)]))
        c.send("input_audio_buffer.commit")
        done = c.until("conversation.item.input_audio_transcription.completed", timeout=60)[-1]
        heard = done["transcript"].lower()
        for word in HEARD[name]:
            assert word in heard, heard
    finally:
        c.close()


def test_a_spoken_turn_by_a_person_gets_a_spoken_answer(live) -> None:
    pcm, rate = CLIPS["Front Center"]
    c = Client(live, "")
    try:
        c.until("session.created")
        # a short answer: what is tested is the turn, not how long the model talks
        c.send("session.update", session={"type": "realtime", "max_output_tokens": 24})
        c.until("session.updated")
        c.append(np.concatenate([silence(0.3, RATE), to_rate(pcm, rate, RATE), silence(1.2, RATE)]))
        events = c.until("response.done", timeout=120)
        kinds = [e["type"] for e in events]
        assert "input_audio_buffer.speech_stopped" in kinds
        assert "response.output_audio.delta" in kinds
        heard = next(
            e["transcript"]
            for e in events
            if e["type"] == "conversation.item.input_audio_transcription.completed"
        )
        assert "front" in heard.lower(), heard
    finally:
        c.close()
