"""llama.cpp's own speech generation, for real: a tiny random-weight Pocket TTS checkpoint in
the release's layout (`llamactl.converters.example_pockettts`), converted by llamactl to the
backbone + mmproj pair, loaded by llama.cpp and driven through mtmd's generation helper.

The speech is noise (random weights); what is checked is the path: streamed PCM at the model's
rate, seeds, voice cloning, refusals, requests side by side, `/tts`, `/v1/audio/speech`,
realtime audio output and `llamactl tts`.
"""

from __future__ import annotations

import io
import threading
import wave
from pathlib import Path

import gguf
import httpx
import numpy as np
import pytest
from typer.testing import CliRunner

from llamactl.cli.main import app
from llamactl.core.errors import InvalidRequestError
from llamactl.engine.audio.synth_mtmd import MtmdSynthesizer, open_mtmd_synthesizer, probe

pytestmark = pytest.mark.slow  # every test loads the model in llama.cpp

TEXT = "Say hello to me."
FRAME = 1920  # samples of one 12.5 Hz frame at 24 kHz


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The converted (backbone, mmproj). Its end-of-speech head never fires, so each chunk
    runs to llama.cpp's length budget: several frames to stream."""
    from llamactl.converters import convert
    from llamactl.converters.example_pockettts import build_pockettts

    root = tmp_path_factory.mktemp("pocket")
    ckpt = build_pockettts(root / "tiny", eos_after=-20.0)
    model = convert(ckpt, root / "tiny.gguf").outfile
    mmproj = convert(ckpt, root / "tiny.gguf", mmproj=True).outfile
    return model, mmproj


@pytest.fixture(scope="module")
def synth(pair: tuple[Path, Path]):
    s = open_mtmd_synthesizer(*pair, threads=2)
    yield s
    s.close()


def _say(synth, text: str = TEXT, **kw) -> np.ndarray:
    return np.concatenate(list(synth.synthesize(text, **kw)))


def _reference_wav(seconds: float = 2.0) -> bytes:
    t = np.arange(int(seconds * 16000)) / 16000
    tone = (0.3 * np.sin(2 * np.pi * 220 * t) * 32767).astype(np.int16)
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(tone.tobytes())
    return buf.getvalue()


def test_the_converted_pair_is_what_llama_cpp_expects(pair):
    model, mmproj = pair
    backbone = gguf.GGUFReader(str(model))
    assert bytes(backbone.fields["general.architecture"].parts[-1]).decode() == "pockettts"
    tokens = backbone.fields["tokenizer.ggml.tokens"]
    names = [bytes(tokens.parts[i]).decode() for i in tokens.data]
    assert names[-3:] == ["<|pad|>", "<|bos_before_voice|>", "<|audio_bos|>"]
    table = next(t for t in backbone.tensors if t.name == "token_embd.weight")
    assert int(table.shape[1]) == len(names)  # one row per token, the learned vectors too
    proj = gguf.GGUFReader(str(mmproj))
    keys = {k: proj.fields[k] for k in proj.fields}
    assert bytes(keys["clip.gen.audio.projector_type"].parts[-1]).decode() == "pockettts_gen"
    assert bytes(keys["clip.audio.projector_type"].parts[-1]).decode() == "pockettts_spkenc"
    assert bytes(keys["clip.gen.audio.model_variant"].parts[-1]).decode() == "tiny"
    info = probe(model, mmproj)
    assert (info.generator, info.sample_rate, info.variant) == ("pocket-tts", 24000, "tiny")


def test_speech_streams_frame_by_frame_at_the_model_rate(synth):
    assert isinstance(synth, MtmdSynthesizer) and synth.sample_rate == 24000
    chunks = list(synth.synthesize(TEXT, seed=1))
    assert len(chunks) > 10  # one chunk a decoded frame, not one at the end
    assert all(c.dtype == np.float32 and c.ndim == 1 for c in chunks)
    audio = np.concatenate(chunks)
    assert audio.size % FRAME == 0 and audio.size >= 10 * FRAME
    assert np.all(np.abs(audio) <= 1.0) and float(np.abs(audio).max()) > 0


def test_the_same_seed_gives_the_same_samples_and_another_seed_others(synth):
    first = _say(synth, seed=7)
    _say(synth, seed=8)  # another request in between changes nothing
    again = _say(synth, seed=7)
    twice = _say(synth, seed=7)  # the same seed twice in a row: clip must start afresh
    assert np.array_equal(first, again) and np.array_equal(first, twice)
    assert not np.array_equal(first, _say(synth, seed=8 + 1))


def test_a_long_text_is_spoken_in_chunks(synth):
    short = _say(synth, seed=3)
    long = _say(synth, " ".join([TEXT] * 12), seed=3)
    assert long.size > 3 * short.size


def test_a_reference_recording_changes_the_voice(synth):
    assert synth.can_clone and "speaker_ref" in synth.voices()[0].description
    plain = _say(synth, seed=5)
    cloned = _say(synth, seed=5, speaker_ref=_reference_wav())
    assert not np.array_equal(plain, cloned)
    assert np.array_equal(cloned, _say(synth, seed=5, speaker_ref=_reference_wav()))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"speed": 1.5}, "speaks at its own pace"),
        ({"speaker_ref": b"not audio"}, "not an audio file"),
        ({"speaker_ref": _reference_wav(0.2)}, "0.2 s of audio"),
        ({"speaker_ref": _reference_wav(31.0)}, "31.0 s of audio"),
    ],
)
def test_what_it_cannot_do_is_refused_with_a_reason(synth, kwargs, message):
    with pytest.raises(InvalidRequestError, match=message):
        list(synth.synthesize(TEXT, **kwargs))
    assert _say(synth, seed=1).size > 0  # and it still speaks


def test_an_abandoned_stream_frees_the_model_for_the_next(synth):
    stream = synth.synthesize(TEXT, seed=2)
    next(stream)
    stream.close()
    assert np.array_equal(_say(synth, seed=2), _say(synth, seed=2))


def test_requests_side_by_side_each_speak_as_alone(synth):
    alone = {seed: _say(synth, seed=seed) for seed in (11, 12, 13)}
    together: dict[int, np.ndarray] = {}

    def speak(seed: int) -> None:
        together[seed] = _say(synth, seed=seed)

    threads = [threading.Thread(target=speak, args=(seed,)) for seed in alone for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert all(np.array_equal(together[s], alone[s]) for s in alone)


# --------------------------------------------------------------------------------- CLI
def test_cli_writes_the_models_speech(tmp_path, pair):
    model, mmproj = pair
    out = tmp_path / "hello.wav"
    args = ["tts", TEXT, "--model", str(model), "--mmproj", str(mmproj), "--seed", "4"]
    result = CliRunner().invoke(app, [*args, "-o", str(out)])
    assert result.exit_code == 0, result.output
    with wave.open(str(out)) as w:
        assert w.getframerate() == 24000 and w.getnframes() >= 10 * FRAME
        first = w.readframes(w.getnframes())
    assert CliRunner().invoke(app, [*args, "-o", str(out)]).exit_code == 0
    with wave.open(str(out)) as w:
        assert w.readframes(w.getnframes()) == first
    listed = CliRunner().invoke(
        app, ["tts", "--list-voices", "--model", str(model), "--mmproj", str(mmproj)]
    )
    assert listed.exit_code == 0 and "default" in listed.output
    slow = CliRunner().invoke(app, [*args, "--speed", "0.5", "-o", str(tmp_path / "s.wav")])
    assert slow.exit_code == 1 and "own pace" in slow.output and "Traceback" not in slow.output


# ------------------------------------------------------------------------------ server
def test_tts_and_speech_endpoints_speak_with_the_model(pair):
    from serverkit import run_server

    model, mmproj = pair
    with run_server(parallel=1, tts_model=str(model), tts_mmproj=str(mmproj)) as live:
        body = {"input": TEXT, "seed": 9}
        first = httpx.post(live.url + "/tts", json=body, timeout=120)
        assert first.status_code == 200, first.text
        again = httpx.post(live.url + "/tts", json=body, timeout=120)
        assert first.content == again.content  # same text, voice and seed: the same WAV
        with wave.open(io.BytesIO(first.content)) as w:
            assert w.getframerate() == 24000 and w.getnframes() >= 10 * FRAME
            samples = w.readframes(w.getnframes())
        streamed = bytearray()
        with httpx.stream("POST", live.url + "/tts", json={**body, "stream": True}) as r:
            assert r.status_code == 200
            for part in r.iter_bytes():
                streamed.extend(part)
        assert bytes(streamed) == samples  # the same samples, sent as they were made

        speech = {"model": "tts-1", "input": TEXT, "voice": "alloy", "response_format": "pcm"}
        results: list[bytes] = []

        def ask() -> None:
            r = httpx.post(live.v1 + "/audio/speech", json=speech, timeout=120)
            assert r.status_code == 200, r.text
            results.append(r.content)

        threads = [threading.Thread(target=ask) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert len(results) == 3 and all(len(r) >= 10 * FRAME * 2 for r in results)
        bad = httpx.post(live.url + "/tts", json={"input": TEXT, "speed": 2.0}, timeout=60)
        assert bad.status_code == 400 and "own pace" in bad.json()["error"]["message"]


def _realtime_answer(url: str, question: str) -> tuple[dict, bytes]:
    """One realtime session: a typed question, an answer in audio; (response.done, PCM)."""
    import base64
    import json

    from websockets.sync.client import connect

    with connect(url.replace("http://", "ws://") + "/v1/realtime", open_timeout=30) as ws:
        audio = bytearray()

        def until(kind: str) -> dict:
            while True:
                event = json.loads(ws.recv(timeout=180))
                if event["type"] == "response.output_audio.delta":
                    audio.extend(base64.b64decode(event["delta"]))
                if event["type"] in (kind, "error"):
                    return event

        until("session.created")
        turns = {"audio": {"input": {"turn_detection": None}}, "type": "realtime"}
        ws.send(json.dumps({"type": "session.update", "session": turns}))
        until("session.updated")
        item = {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": question}],
        }
        ws.send(json.dumps({"type": "conversation.item.create", "item": item}))
        ask = {"output_modalities": ["audio"], "max_output_tokens": 24}
        ws.send(json.dumps({"type": "response.create", "response": ask}))
        return until("response.done"), bytes(audio)


def test_realtime_answers_are_spoken_by_the_model(pair):
    from serverkit import run_server

    model, mmproj = pair
    with run_server(
        parallel=2, temperature=0.0, tts_model=str(model), tts_mmproj=str(mmproj)
    ) as live:
        answers: list[tuple[dict, bytes]] = []

        def ask(question: str) -> None:
            answers.append(_realtime_answer(live.url, question))

        threads = [
            threading.Thread(target=ask, args=(q,))
            for q in ("What is the capital of France?", "Name a colour.")
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        assert len(answers) == 2
        for done, pcm in answers:
            assert done["type"] == "response.done", done
            assert done["response"]["status"] == "completed", done["response"]
            # 16-bit PCM at the session's 24 kHz: the model's frames, at least one of them
            assert len(pcm) >= FRAME * 2 and len(pcm) % 2 == 0
