"""The speech engine in-process: PCM handling, files, batch transcription, model loading.

Speech is eSpeak NG (tests/audiokit.py); the embedded Whisper tiny.en must transcribe it
with a word error rate of at most WER_BOUND (it measures about 0.02-0.05 on these sentences).
"""

from __future__ import annotations

import io

import numpy as np
import pytest
from audiokit import SENTENCES, speech, utterances, wav_bytes, wer

from llamactl.core.errors import InvalidRequestError, ModelLoadError, ModelNotFoundError
from llamactl.engine.audio import AudioService
from llamactl.engine.audio.decode import AudioDecodeError, read_audio
from llamactl.engine.audio.load import find_mmproj, load_transcriber
from llamactl.engine.audio.pcm import StreamResampler, resample, to_float32, to_pcm16

MODEL_FIXTURES = {"service"}  # fixtures that load a model: users are slow

VOICE = "en-us+f2"
WER_BOUND = 0.25


@pytest.fixture(scope="module")
def service():
    svc = AudioService(threads=2)
    yield svc
    svc.close()


# ------------------------------------------------------------------ PCM
def test_pcm_conversions():
    ints = np.array([0, 16384, -32768], dtype=np.int16)
    assert to_float32(ints.tobytes()).tolist() == [0.0, 0.5, -1.0]
    assert to_float32(ints).tolist() == [0.0, 0.5, -1.0]
    stereo = np.stack([ints, ints], axis=1)
    assert to_float32(stereo).tolist() == [0.0, 0.5, -1.0]
    assert to_float32(np.array([0.25], dtype=np.float64)).dtype == np.float32
    assert np.frombuffer(to_pcm16(np.array([2.0, -0.5], np.float32)), "<i2").tolist() == [
        32767,
        -16384,
    ]
    with pytest.raises(InvalidRequestError, match="even number"):
        to_float32(b"\x00\x01\x02")


def test_chunked_resampling_matches_one_shot():
    x = np.random.default_rng(1).standard_normal(24000).astype(np.float32) * 0.1
    r = StreamResampler(24000, 16000)
    parts = [r.push(x[i : i + 1234]) for i in range(0, x.size, 1234)] + [r.flush()]
    chunked, whole = np.concatenate(parts), resample(x, 24000, 16000)
    assert abs(chunked.size - whole.size) <= 1
    n = min(chunked.size, whole.size)
    assert np.abs(chunked[:n] - whole[:n]).max() < 1e-4


# ---------------------------------------------------------------- files
def test_read_wav_and_compressed_files(tmp_path):
    pcm, rate = speech(SENTENCES[0], VOICE)
    audio, got_rate = read_audio(wav_bytes(pcm, rate))
    assert got_rate == rate and audio.size == pcm.size
    flac = tmp_path / "a.flac"
    _encode(flac, pcm, rate, "flac")
    audio2, rate2 = read_audio(flac)
    assert rate2 == rate and abs(audio2.size - pcm.size) < rate // 10
    assert np.abs(audio2[: pcm.size] - audio[: audio2.size]).max() < 1e-3  # lossless
    with pytest.raises(AudioDecodeError):
        read_audio(b"this is not audio at all" * 10)
    with pytest.raises(AudioDecodeError, match="empty"):
        read_audio(b"")


def _encode(path, pcm: np.ndarray, rate: int, codec: str) -> None:
    import av

    with av.open(str(path), "w") as out:
        stream = out.add_stream(codec, rate=rate, layout="mono")
        frame = av.AudioFrame.from_ndarray(pcm.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = rate
        for packet in stream.encode(frame):
            out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)


# ---------------------------------------------------------- transcription
def test_batch_transcription_word_error_rate(service):
    pcm, rate = utterances(SENTENCES, voice=VOICE)
    segments = list(service.transcribe(pcm, rate))
    text = " ".join(s.text for s in segments)
    assert wer(" ".join(SENTENCES), text) <= WER_BOUND, text
    starts = [s.start for s in segments]
    assert starts == sorted(starts)
    assert all(0 <= s.start < s.end <= pcm.size / rate + 0.5 for s in segments)


def test_resampled_and_float_input_transcribe_alike(service):
    pcm, rate = speech(SENTENCES[1], VOICE)
    at48 = resample(to_float32(pcm), rate, 48000)
    text = " ".join(s.text for s in service.transcriber.transcribe(at48, 48000))
    assert wer(SENTENCES[1], text) <= WER_BOUND, text


def test_silence_and_noise_give_no_text(service):
    rng = np.random.default_rng(2)
    noise = (rng.standard_normal(16000 * 4) * 0.01).astype(np.float32)
    assert service.transcriber.transcribe(noise, 16000) == []
    assert service.transcriber.transcribe(np.zeros(16000 * 3, np.float32), 16000) == []


def test_english_only_model_refuses_other_languages(service):
    assert service.transcriber.check_language("English") == "en"
    with pytest.raises(InvalidRequestError, match="English only"):
        service.transcriber.check_language("fr")


# ---------------------------------------------------------------- loading
def test_loader_errors_are_clear(tmp_path):
    with pytest.raises(ModelNotFoundError, match="speech model not found"):
        load_transcriber(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelNotFoundError, match="not a CTranslate2 Whisper model"):
        load_transcriber(tmp_path / "empty")
    half = tmp_path / "half"
    half.mkdir()
    (half / "model.bin").write_bytes(b"x")
    (half / "config.json").write_text("{}")
    with pytest.raises(ModelLoadError, match="no tokenizer.json"):  # never fetched from a hub
        load_transcriber(half)
    gguf = tmp_path / "speech.gguf"
    gguf.write_bytes(b"GGUF")
    with pytest.raises(ModelNotFoundError, match="needs an mmproj"):
        find_mmproj(gguf)


def test_service_batches_share_the_worker(service):
    pcm, rate = speech(SENTENCES[2], VOICE)
    buf = io.BytesIO(wav_bytes(pcm, rate))
    audio, rate = read_audio(buf)
    first = list(service.transcribe(audio, rate))
    second = list(service.transcribe(audio, rate))
    assert first == second and first
