"""Smart Turn v3.2 (the model inside the pipecat-ai wheel, fetched from PyPI without its
dependencies) tells a finished question from a sentence cut in the middle."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest
from audiokit import speech, to_rate

from llamactl.engine.audio.turn import SmartTurn, fetch_model


@pytest.fixture(scope="module")
def smart_turn() -> SmartTurn:
    try:
        path = fetch_model()
    except subprocess.CalledProcessError as exc:  # no route to PyPI
        pytest.skip(f"the pipecat-ai wheel could not be fetched: {exc}")
    return SmartTurn(path)


def _spoken(text: str) -> np.ndarray:
    pcm, rate = speech(text, "en-us")
    audio = to_rate(pcm, rate, 16000).astype(np.float32)
    return np.concatenate([audio, np.zeros(3200, np.float32)])  # 200 ms of silence after


def test_a_finished_question_ends_the_turn_and_a_cut_sentence_does_not(smart_turn):
    assert smart_turn.probability(_spoken("What is the capital of France?")) > 0.5
    assert smart_turn.probability(_spoken("I would like to know what the")) < 0.5


def test_only_the_last_eight_seconds_are_read(smart_turn):
    talk = [_spoken("We walked along the river and talked about the weather.")] * 6
    long = np.concatenate([*talk, _spoken("What is the capital of France?")])
    assert long.size > 16000 * 15  # well past the 8 s window
    last = long[-16000 * 8 :]
    assert smart_turn.probability(long) == pytest.approx(smart_turn.probability(last), abs=1e-6)
    assert 0.0 <= smart_turn.probability(long[:8000]) <= 1.0  # half a second, padded
