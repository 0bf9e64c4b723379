"""`POST /tts` and `POST /v1/audio/speech` on the live server, through httpx and the openai SDK."""

from __future__ import annotations

import base64
import io
import json
import wave
from concurrent.futures import ThreadPoolExecutor

import av
import httpx
import numpy as np
import openai
import pytest

TEXT = "The train to the city leaves at seven in the morning."


def _wav(data: bytes) -> tuple[np.ndarray, int]:
    with wave.open(io.BytesIO(data)) as w:
        assert (w.getnchannels(), w.getsampwidth()) == (1, 2)
        return np.frombuffer(w.readframes(w.getnframes()), "<i2"), w.getframerate()


def _loud(samples: np.ndarray) -> bool:
    return float(np.sqrt(np.mean(samples.astype(np.float64) ** 2))) > 500


def _error(r: httpx.Response, status: int, field: str) -> str:
    assert r.status_code == status, r.headers.get("content-type")
    message = r.json()["error"]["message"]
    assert f"'{field}'" in message
    return message


def test_tts_json_returns_wav(server):
    r = httpx.post(server.url + "/tts", json={"input": TEXT, "seed": 4294967295}, timeout=30)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "audio/wav"
    samples, rate = _wav(r.content)
    assert rate == int(r.headers["x-sample-rate"]) == 22050
    assert samples.size / rate > 2 and _loud(samples)
    short, _ = _wav(httpx.post(server.url + "/tts", json={"input": "Hi."}, timeout=30).content)
    assert short.size < samples.size / 3


def test_the_same_request_gives_the_same_wav_even_when_sent_together(server):
    """Same text, voice and seed: byte-identical WAVs, one after another or four at once."""
    body = {"input": TEXT, "voice": "en-gb", "seed": 7}
    first = httpx.post(server.url + "/tts", json=body, timeout=30)
    assert first.status_code == 200
    with ThreadPoolExecutor(4) as pool:
        replies = list(
            pool.map(lambda _: httpx.post(server.url + "/tts", json=body, timeout=60), range(4))
        )
    assert all(r.content == first.content for r in replies)


def test_tts_multipart_coerces_seed_and_stream(server):
    form = {"input": TEXT, "seed": "42", "stream": "true"}
    with httpx.stream("POST", server.url + "/tts", files={"input": (None, TEXT)}, data=form) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("audio/pcm;rate=22050")
        assert r.headers["x-sample-rate"] == "22050"
        parts = list(r.iter_raw())
    pcm = np.frombuffer(b"".join(parts), "<i2")
    assert pcm.size / 22050 > 2 and _loud(pcm)


def test_tts_multipart_stream_false_gives_wav(server):
    r = httpx.post(
        server.url + "/tts", files={"x": (None, "")}, data={"input": "Hi.", "stream": "false"}
    )
    assert r.status_code == 200 and r.headers["content-type"] == "audio/wav"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"json": {}}, "input"),
        ({"json": {"input": 3}}, "input"),
        ({"json": {"input": "hi", "seed": "42"}}, "seed"),  # no coercion outside forms
        ({"json": {"input": "hi", "stream": "true"}}, "stream"),
        ({"json": {"input": "hi", "seed": 2**64}}, "seed"),
        ({"json": {"input": "hi", "speed": 10}}, "speed"),
        ({"json": {"input": "hi", "voice": "no-such-voice"}}, "voice"),
        ({"json": {"input": "hi", "speaker_ref": "not base64!"}}, "speaker_ref"),
        ({"files": {"x": (None, "")}, "data": {"input": "hi", "seed": "abc"}}, "seed"),
        ({"files": {"x": (None, "")}, "data": {"input": "hi", "stream": "maybe"}}, "stream"),
    ],
)
def test_tts_bad_fields_are_400(server, kwargs, field):
    _error(httpx.post(server.url + "/tts", **kwargs), 400, field)


def test_tts_speaker_ref_is_not_supported_by_espeak(server):
    ref = ("ref.wav", b"RIFF0000WAVEfmt ", "audio/wav")
    r = httpx.post(server.url + "/tts", data={"input": "hi"}, files={"speaker_ref": ref})
    assert _error(r, 501, "speaker_ref")
    assert r.json()["error"]["type"] == "not_supported_error"
    encoded = base64.b64encode(b"RIFF0000WAVEfmt ").decode()
    r = httpx.post(server.url + "/tts", json={"input": "hi", "speaker_ref": encoded})
    assert r.status_code == 501


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.v1, api_key="unused", max_retries=0)


def test_openai_sdk_speech_formats(client):
    wav = client.audio.speech.create(
        model="tts-1", voice="alloy", input=TEXT, response_format="wav"
    )
    samples, rate = _wav(wav.content)
    assert rate == 22050 and samples.size / rate > 2 and _loud(samples)
    mp3 = client.audio.speech.create(model="tts-1", voice="nova", input=TEXT)  # default mp3
    with av.open(io.BytesIO(mp3.content)) as container:
        assert container.format.name == "mp3"
        decoded = sum(f.samples for f in container.decode(container.streams.audio[0]))
    assert abs(decoded - samples.size) < 0.2 * samples.size
    fast = client.audio.speech.create(
        model="tts-1", voice="alloy", input=TEXT, response_format="wav", speed=2.0
    )
    assert _wav(fast.content)[0].size < 0.7 * samples.size


def test_openai_sdk_streams_pcm(client):
    with client.audio.speech.with_streaming_response.create(
        model="tts-1", voice="echo", input=TEXT, response_format="pcm", stream_format="audio"
    ) as response:
        assert response.headers["x-sample-rate"] == "22050"
        data = b"".join(response.iter_bytes())
    pcm = np.frombuffer(data, "<i2")
    assert pcm.size / 22050 > 2 and _loud(pcm)


def test_speech_sse(server):
    body = {"input": TEXT, "voice": "en-gb", "response_format": "pcm", "stream_format": "sse"}
    r = httpx.post(server.v1 + "/audio/speech", json=body, timeout=30)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")

    events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]
    assert [e["type"] for e in events][-1] == "speech.audio.done"
    deltas = [base64.b64decode(e["audio"]) for e in events[:-1]]
    assert len(deltas) > 1 and all(e["type"] == "speech.audio.delta" for e in events[:-1])


def test_openai_sdk_errors(client):
    with pytest.raises(openai.BadRequestError) as err:
        client.audio.speech.create(model="tts-1", voice="alloy", input=TEXT, response_format="opus")
    assert "response_format" in err.value.body["message"]
    with pytest.raises(openai.BadRequestError) as err:
        client.audio.speech.create(model="tts-1", voice="alloy", input=TEXT, speed=5)
    assert "speed" in err.value.body["message"]
    with pytest.raises(openai.BadRequestError) as err:
        client.audio.speech.create(model="tts-1", voice="alloy", input="")
    assert "input" in err.value.body["message"]


def test_every_openai_voice_is_an_espeak_voice():
    from llamactl.server.openai.voices import OPENAI_VOICES

    from llamactl.engine.audio.synth import open_synthesizer

    synth = open_synthesizer()
    for name in OPENAI_VOICES.values():
        synth.synthesize("hi", voice=name).close()  # validated, never run
