"""The echo canceller (llamactl.devices.echo) as the issue asks for it: the played answer,
delayed and attenuated through a small room, mixed into what the microphone hears. The VAD
the server runs (Silero, llamactl.engine.audio.vad) must not fire on the echo alone, and must
fire on the user talking over it."""

from __future__ import annotations

import numpy as np
import pytest
import soxr
from audiokit import SENTENCES, speech

from llamactl.devices.echo import EchoCanceller
from llamactl.engine.audio.vad import VAD_RATE, speech_regions

RATE = 24000  # what the TUI records and plays
NOISE = 3e-4  # the room's noise (-70 dBFS)


def _say(i: int, voice: str = "en-us") -> np.ndarray:
    samples, rate = speech(SENTENCES[i], voice)
    return soxr.resample(samples.astype(np.float32) / 32768, rate, RATE)


@pytest.fixture(scope="module")
def answers() -> np.ndarray:
    """Two spoken answers with a second of silence after each: what the speaker plays."""
    gap = np.zeros(RATE, np.float32)
    return np.concatenate([_say(3), gap, _say(4), gap]).astype(np.float32)


@pytest.fixture(scope="module")
def user() -> np.ndarray:
    return _say(0, "en-us+f2")


def _room(
    played: np.ndarray, delay_ms: float, gain: float, *, hard: bool = False, drift_ppm: float = 0
) -> np.ndarray:
    """What the microphone hears of `played`: late by `delay_ms`, with three reflections;
    `hard`: a small speaker driven into soft clipping, in a room that reverberates for 0.3 s
    (a tail of -6 dB, longer than the canceller's filter); `drift_ppm`: the microphone's clock
    that far from the player's."""
    response = np.zeros(int((0.3 if hard else 0.05) * RATE))
    if hard:
        t = np.arange(response.size) / RATE
        tail = np.random.default_rng(2).normal(0, 1, response.size) * 10 ** (-3 * t / 0.3)
        response += tail * np.sqrt(0.25 / np.sum(tail**2))
        played = np.tanh(2.5 * played) / 2.5
    for at_ms, level in ((0, 1.0), (7, 0.35), (23, -0.2), (41, 0.1)):
        response[int(at_ms * RATE / 1000)] = level
    wet = np.convolve(played, response)[: played.size] * gain
    if drift_ppm:  # the microphone's clock runs apart from the player's
        at = np.arange(played.size) * (1 + drift_ppm * 1e-6)
        wet = np.interp(at, np.arange(played.size), wet, right=0.0)
    late = np.concatenate([np.zeros(int(delay_ms * RATE / 1000)), wet])[: played.size]
    return late + np.random.default_rng(0).normal(0, NOISE, played.size)


def _cancel(mic: np.ndarray, played: np.ndarray, play_block: int, mic_block: int) -> np.ndarray:
    """Both streams as devices deliver them: the player's blocks and the microphone's, in
    time order (the player runs a block ahead)."""
    canceller = EchoCanceller(RATE)
    out, played_upto = [], 0
    for start in range(0, mic.size - mic_block + 1, mic_block):
        while played_upto < start + mic_block:
            canceller.played(played[played_upto : played_upto + play_block])
            played_upto += play_block
        out.append(canceller.process(mic[start : start + mic_block]))
    return np.concatenate(out)


def _speech(samples: np.ndarray) -> list[tuple[float, float]]:
    audio = soxr.resample(samples.astype(np.float32), RATE, VAD_RATE)
    return [(a / VAD_RATE, b / VAD_RATE) for a, b in speech_regions(audio)]


def test_nothing_played_leaves_the_microphone_as_it_is(user: np.ndarray) -> None:
    mic = np.concatenate([np.zeros(RATE // 2), user, np.zeros(RATE // 2)]).astype(np.float32)
    out = _cancel(mic, np.zeros_like(mic), 480, 2400)
    lag = int(np.argmax(np.correlate(out[:RATE], mic[: RATE - 512], "valid")))
    assert lag < 512  # late by under one of its blocks
    assert np.allclose(out[lag:], mic[: out.size - lag], atol=1e-6)


@pytest.mark.parametrize(
    ("delay_ms", "gain", "hard"),
    [(40, 1.0, False), (150, 0.5, False), (450, 0.3, False), (200, 1.0, True)],
)
def test_the_echo_alone_is_not_taken_for_speech(
    answers: np.ndarray, delay_ms: float, gain: float, hard: bool
) -> None:
    mic = _room(answers, delay_ms, gain, hard=hard)
    assert _speech(mic)  # without the canceller, the VAD hears the assistant
    assert _speech(_cancel(mic, answers, 480, 2400)) == []


@pytest.mark.parametrize(
    ("delay_ms", "gain", "hard", "level"),
    [(40, 1.0, False, 0.8), (300, 0.5, False, 0.8), (200, 1.0, True, 0.5)],
)
def test_the_user_talking_over_the_echo_is_heard(
    answers: np.ndarray, user: np.ndarray, delay_ms: float, gain: float, hard: bool, level: float
) -> None:
    """A barge-in a second into the second answer: speech found where the user starts. In
    the hard room the user is quieter than the loudspeaker's echo: the residual is damped
    per frequency, so the user's voice gets through where the echo's does not."""
    mic = _room(answers, delay_ms, gain, hard=hard)
    onset = _say(3).size + RATE + RATE  # one second into the second answer
    mic[onset : onset + user.size] += level * user[: mic.size - onset]
    found = _speech(_cancel(mic, answers, 480, 2400))
    assert len(found) == 1
    start, end = found[0]
    assert onset / RATE - 0.5 < start < onset / RATE + 0.2
    assert end > (onset + user.size) / RATE - 0.3  # the whole utterance, not its first word


def test_without_an_echo_the_user_is_heard_while_the_assistant_talks(
    answers: np.ndarray, user: np.ndarray
) -> None:
    """Headphones: nothing comes back, so nothing is damped once that is clear."""
    mic = np.random.default_rng(1).normal(0, NOISE, answers.size)
    onset = _say(3).size + RATE + RATE
    mic[onset : onset + user.size] += 0.8 * user[: mic.size - onset]
    found = _speech(_cancel(mic, answers, 480, 2400))
    assert len(found) == 1 and abs(found[0][0] - (onset / RATE - 0.3)) < 0.2


@pytest.mark.parametrize("drift_ppm", [-100, 100])
def test_clocks_drifting_apart_are_followed(
    answers: np.ndarray, user: np.ndarray, drift_ppm: float
) -> None:
    """Microphone and speaker on separate sound cards: the echo slides by 2.4 samples a
    second. The canceller measures that drift on the first answers' echo and follows it, so
    a barge-in over the third answer is heard and the echo alone is not."""
    played = np.concatenate([answers, answers[: _say(3).size + RATE]])
    mic = _room(played, 150, 0.7, drift_ppm=drift_ppm)
    assert _speech(_cancel(mic, played, 480, 2400)) == []
    onset = answers.size + RATE  # a second into the third answer
    mic[onset : onset + user.size] += 0.8 * user[: mic.size - onset]
    found = _speech(_cancel(mic, played, 480, 2400))
    assert len(found) == 1
    assert onset / RATE - 0.5 < found[0][0] < onset / RATE + 0.2
