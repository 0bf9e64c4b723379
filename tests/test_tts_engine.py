"""The eSpeak NG synthesizer: real audio, streamed, cancellable, and its containers."""

from __future__ import annotations

import io
import threading
import time

import av
import numpy as np
import pytest

from llamactl.core.errors import InvalidRequestError, UnsupportedVoiceFeature
from llamactl.engine.audio.synth import open_synthesizer
from llamactl.engine.audio.synth_encode import encode

SHORT = "Hello there."
LONG = "The weather is nice today and we are going to the park after lunch. " * 3


@pytest.fixture(scope="module")
def synth():
    return open_synthesizer()


def _speak(synth, text: str, **kw) -> np.ndarray:
    return np.concatenate(list(synth.synthesize(text, **kw)))


def test_speech_has_rate_length_and_energy(synth):
    assert synth.sample_rate == 22050
    short, long = _speak(synth, SHORT), _speak(synth, LONG)
    assert short.dtype == np.int16
    assert 0.4 < short.size / synth.sample_rate < 3
    assert long.size > 4 * short.size  # duration grows with the text
    rms = np.sqrt(np.mean(long.astype(np.float64) ** 2))
    assert rms > 500  # not silence


def test_speed_and_voice_change_the_audio(synth):
    normal = _speak(synth, LONG)
    assert _speak(synth, LONG, speed=2.0).size < 0.7 * normal.size
    french = _speak(synth, LONG, voice="fr")
    assert french.size != normal.size
    assert any(v.name == "en-us" for v in synth.voices())


def test_chunks_stream_before_the_end_and_close_cancels(synth):
    chunks = synth.synthesize(LONG * 20)
    first = next(chunks)
    assert 0 < first.size < 0.2 * synth.sample_rate  # one buffer, not the utterance
    producers = [t for t in threading.enumerate() if t.name == "espeak-synth"]
    assert producers  # still synthesizing the rest when the first chunk arrived
    started = time.perf_counter()
    chunks.close()
    assert time.perf_counter() - started < 1
    assert not any(t.is_alive() for t in producers)
    assert _speak(synth, SHORT).size > 0  # the library is free again


def test_errors(synth):
    with pytest.raises(InvalidRequestError, match="voice"):
        synth.synthesize(SHORT, voice="no-such-voice")
    with pytest.raises(InvalidRequestError, match="speed"):
        synth.synthesize(SHORT, speed=9)
    with pytest.raises(UnsupportedVoiceFeature):
        synth.synthesize(SHORT, speaker_ref=b"RIFF")


@pytest.mark.parametrize("fmt", ["wav", "flac", "mp3"])
def test_containers_decode_back(synth, fmt):
    samples = _speak(synth, SHORT)
    with av.open(io.BytesIO(encode(samples, synth.sample_rate, fmt))) as container:
        stream = container.streams.audio[0]
        decoded = sum(frame.samples for frame in container.decode(stream))
        assert stream.rate == synth.sample_rate
    assert abs(decoded - samples.size) < 0.1 * samples.size


def test_the_same_request_gives_the_same_samples(synth):
    """eSpeak NG's state carries over between utterances in one library instance; each
    synthesis starts from a fresh one, so repeats (and a different text in between) match."""
    text = "Hello there, this is a test of the voice."
    first = np.concatenate(list(synth.synthesize(text)))
    list(synth.synthesize("Something else entirely, to move any state along."))
    again = [np.concatenate(list(synth.synthesize(text))) for _ in range(2)]
    assert all(np.array_equal(first, a) for a in again)


def test_concurrent_syntheses_equal_their_solo_runs(synth):
    texts = [f"Sentence number {k} is spoken while the others are." for k in range(4)]
    solo = [np.concatenate(list(synth.synthesize(t))) for t in texts]
    results: dict[int, np.ndarray] = {}

    def speak(k: int) -> None:
        results[k] = np.concatenate(list(synth.synthesize(texts[k])))

    threads = [threading.Thread(target=speak, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert all(np.array_equal(results[k], solo[k]) for k in range(4))
