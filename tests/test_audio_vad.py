"""Streaming Silero VAD: identical to faster-whisper's one-shot run, and finds speech only."""

from __future__ import annotations

import numpy as np
from audiokit import SENTENCES, silence, speech, utterances

from llamactl.engine.audio.pcm import resample, to_float32
from llamactl.engine.audio.vad import WINDOW, SileroStream, VadConfig, speech_regions


def _audio16(pcm: np.ndarray, rate: int) -> np.ndarray:
    return resample(to_float32(pcm), rate, 16000)


def test_streaming_probabilities_equal_the_one_shot_run():
    from faster_whisper.vad import get_vad_model

    pcm, rate = utterances(SENTENCES[:1])
    audio = _audio16(pcm, rate)
    audio = audio[: audio.size // WINDOW * WINDOW]
    whole = np.asarray(get_vad_model()(audio.copy())).reshape(-1)
    stream = SileroStream()
    parts, pos = [], 0
    for n_windows in [1, 3, 7, 2, 11] * 100:  # uneven chunk sizes
        chunk = audio[pos : pos + n_windows * WINDOW]
        if chunk.size == 0:
            break
        parts.append(stream.probs(chunk))
        pos += chunk.size
    assert np.abs(np.concatenate(parts) - whole).max() < 1e-5
    assert whole.max() > 0.9 and whole[:5].max() < 0.3  # speech found, lead-in silence not


def test_regions_cover_each_utterance_and_nothing_else():
    pcm, rate = utterances(SENTENCES[:2], gap=1.5)
    regions = speech_regions(_audio16(pcm, rate), VadConfig())
    assert len(regions) == 2
    first, _ = speech(SENTENCES[0])
    assert regions[0][0] < 0.6 * 16000 < regions[0][1] < regions[1][0]
    assert regions[0][1] < (0.5 + first.size / rate + 1.0) * 16000


def test_silence_and_noise_are_not_speech():
    rng = np.random.default_rng(0)
    noise = (rng.standard_normal(16000 * 3) * 0.005).astype(np.float32)
    assert speech_regions(noise) == []
    assert speech_regions(_audio16(silence(2.0, 16000), 16000)) == []
