"""`POST /v1/audio/transcriptions` through the official OpenAI SDK and raw HTTP."""

from __future__ import annotations

import httpx
import openai
import pytest
from audiokit import SENTENCES, utterances, wav_bytes, wer

MODEL_FIXTURES = {"live"}  # fixtures that load a model: users are slow

VOICE = "en-us+f2"
WER_BOUND = 0.25


@pytest.fixture(scope="module")
def live():
    from serverkit import run_server

    with run_server(parallel=1) as server:
        yield server


@pytest.fixture(scope="module")
def client(live):
    return openai.OpenAI(base_url=live.v1, api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def speech_wav() -> bytes:
    pcm, rate = utterances(SENTENCES[:2], voice=VOICE)
    return wav_bytes(pcm, rate)


REFERENCE = " ".join(SENTENCES[:2])


def test_json_through_the_sdk(client, speech_wav):
    result = client.audio.transcriptions.create(
        model="whisper-1", file=("speech.wav", speech_wav, "audio/wav")
    )
    assert wer(REFERENCE, result.text) <= WER_BOUND, result.text
    assert result.usage.type == "duration" and 7 < result.usage.seconds < 10


def test_verbose_json_has_timed_segments(client, speech_wav):
    result = client.audio.transcriptions.create(
        model="whisper-tiny.en",
        file=("speech.wav", speech_wav, "audio/wav"),
        response_format="verbose_json",
        language="en",
    )
    assert result.language == "english" and result.duration > 7
    assert len(result.segments) == 2
    first, second = result.segments
    assert 0 <= first.start < first.end <= second.start < second.end <= result.duration + 0.5
    assert wer(SENTENCES[0], first.text) <= WER_BOUND


def test_text_srt_and_vtt(client, speech_wav):
    file = ("speech.wav", speech_wav, "audio/wav")
    text = client.audio.transcriptions.create(model="whisper-1", file=file, response_format="text")
    assert wer(REFERENCE, text) <= WER_BOUND
    srt = client.audio.transcriptions.create(model="whisper-1", file=file, response_format="srt")
    assert srt.startswith("1\n00:00:0") and " --> " in srt and "\n\n2\n" in srt
    vtt = client.audio.transcriptions.create(model="whisper-1", file=file, response_format="vtt")
    assert vtt.startswith("WEBVTT\n\n00:00:0") and "." in vtt.split("\n")[2]


def test_streaming_deltas_then_done(client, speech_wav):
    stream = client.audio.transcriptions.create(
        model="whisper-1", file=("speech.wav", speech_wav, "audio/wav"), stream=True
    )
    events = list(stream)
    assert [e.type for e in events] == ["transcript.text.delta"] * 2 + ["transcript.text.done"]
    assert "".join(e.delta for e in events[:-1]) == events[-1].text
    assert wer(REFERENCE, events[-1].text) <= WER_BOUND


@pytest.mark.parametrize(
    ("data", "files", "match"),
    [
        ({"model": "whisper-1"}, None, "Field 'file'"),
        ({"response_format": "xml"}, True, "response_format"),
        ({"model": "gpt-9"}, True, "unknown transcription model 'gpt-9'"),
        ({"language": "de"}, True, "English only"),
        ({"stream": "true", "response_format": "srt"}, True, "streaming works with"),
    ],
)
def test_request_errors_are_openai_shaped(live, speech_wav, data, files, match):
    upload = {"file": ("speech.wav", speech_wav, "audio/wav")} if files else None
    r = httpx.post(live.v1 + "/audio/transcriptions", data=data, files=upload, timeout=60)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and match in error["message"]


def test_undecodable_audio_is_a_400(client):
    with pytest.raises(openai.BadRequestError, match="could not decode"):
        client.audio.transcriptions.create(
            model="whisper-1", file=("speech.mp3", b"\xff\xfb" + b"junk" * 500, "audio/mpeg")
        )
