"""The llama.cpp `mtmd` TTS backend's refusals and the speech options around it.

With the embedded text model, synthetic projectors and a tiny converted vision model that
llama.cpp really loads: every way a model "cannot speak" is one clear error, a 501 on `/tts`
and `/v1/audio/speech`, and a one-line message with exit code 1 from `llamactl tts`. A model
that speaks (Pocket TTS) is tests/test_tts_pocket.py.
"""

from __future__ import annotations

import io
import os
import wave
from pathlib import Path

import httpx
import numpy as np
import pytest
from typer.testing import CliRunner

from llamactl.cli.main import app
from llamactl.core.errors import ModelNotFoundError
from llamactl.engine.audio.synth_mtmd import CannotSpeakError, open_mtmd_synthesizer, probe

MODEL_FIXTURES = {"text_model"}  # fixtures that load a model: users are slow


@pytest.fixture(scope="module")
def text_model() -> Path:
    from llamactl.config import load_settings
    from llamactl.models import resolve_model

    return Path(resolve_model(load_settings({}, config_path=os.devnull)).path)


def _projector(path: Path, **flags) -> Path:
    import gguf

    writer = gguf.GGUFWriter(str(path), "clip")
    writer.add_type("mmproj")
    for key, value in flags.items():
        if isinstance(value, bool):
            writer.add_bool(key, value)
        else:
            writer.add_string(key, value)
    writer.add_tensor("a.position_embd.weight", np.zeros((4, 4), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_missing_files_and_no_projector(tmp_path, text_model):
    with pytest.raises(ModelNotFoundError, match="TTS model file not found"):
        probe(tmp_path / "none.gguf", None)
    with pytest.raises(CannotSpeakError, match="needs the mmproj"):
        open_mtmd_synthesizer(text_model, None)
    with pytest.raises(ModelNotFoundError, match="mmproj file not found"):
        probe(text_model, tmp_path / "mmproj.gguf")


def test_wrong_projector_files(tmp_path, text_model):
    junk = tmp_path / "mmproj-junk.gguf"
    junk.write_text("<html>not found</html>")
    with pytest.raises(CannotSpeakError, match="not a GGUF file"):
        probe(text_model, junk)
    with pytest.raises(CannotSpeakError, match="not an mmproj"):
        probe(text_model, text_model)


def test_llama_cpp_refusal_is_explained(tmp_path, text_model):
    broken = _projector(tmp_path / "mmproj-tts.gguf", **{"clip.projector_type": "qwen3tts"})
    with pytest.raises(CannotSpeakError, match="llama.cpp could not load mmproj-tts.gguf"):
        open_mtmd_synthesizer(text_model, broken)


@pytest.mark.slow
def test_a_projector_llama_cpp_loads_but_that_cannot_speak(tmp_path_factory):
    """The whole native path: a tiny converted LFM2 checkpoint and its vision mmproj load in
    llama.cpp (`mtmd_init_from_file`), and `mtmd_gen_audio_get_info` reports no generator."""
    from llamactl.converters import convert
    from synthetic_checkpoints import cached

    out = tmp_path_factory.mktemp("tts_probe")
    src = cached(tmp_path_factory, "lfm2-d1")
    text = convert(src, out / "d1.gguf").outfile
    convert(src, out / "d1.gguf", mmproj=True)
    mmproj = out / "mmproj-d1.gguf"
    assert probe(text, mmproj).generator == ""
    with pytest.raises(CannotSpeakError, match="found no audio generator in mmproj-d1.gguf"):
        open_mtmd_synthesizer(text, mmproj)


# ---------------------------------------------------------------------------- CLI


def _run(*args: str, input: str | None = None):
    return CliRunner().invoke(app, ["tts", *args], input=input)


def _wav(path: Path) -> bytes:
    with wave.open(io.BytesIO(path.read_bytes())) as w:
        return w.readframes(w.getnframes())


def test_cli_model_that_cannot_speak(tmp_path, text_model):
    out = tmp_path / "x.wav"
    result = _run("Hello.", "--model", str(text_model), "-o", str(out))
    assert result.exit_code == 1 and "cannot speak" in result.output
    assert "Traceback" not in result.output and not out.exists()
    result = _run("Hello.", "--mmproj", str(text_model), "-o", str(out))
    assert result.exit_code == 1 and "--mmproj needs --model" in result.output


def test_cli_speaker_ref_and_seed(tmp_path):
    ref = tmp_path / "ref.wav"
    assert _run("This is my voice.", "-o", str(ref)).exit_code == 0
    result = _run("Hello.", "--speaker-ref", str(ref), "-o", str(tmp_path / "c.wav"))
    assert result.exit_code == 1 and "cannot be cloned" in result.output
    empty = tmp_path / "empty.wav"
    empty.write_bytes(b"")
    result = _run("Hello.", "--speaker-ref", str(empty), "-o", str(tmp_path / "c.wav"))
    assert result.exit_code == 1 and "is empty" in result.output
    notaudio = tmp_path / "notes.wav"
    notaudio.write_text("not audio at all")
    result = _run("Hello.", "--speaker-ref", str(notaudio), "-o", str(tmp_path / "c.wav"))
    assert result.exit_code == 1 and "Traceback" not in result.output
    a, b = tmp_path / "a.wav", tmp_path / "b.wav"
    assert _run("Same words.", "--seed", "7", "-o", str(a)).exit_code == 0
    assert _run("Same words.", "-o", str(b)).exit_code == 0
    # eSpeak NG ignores the seed: the same words come out (its noise source makes a few
    # samples, and the length by a few samples, differ from run to run)
    assert abs(len(_wav(a)) - len(_wav(b))) < len(_wav(b)) // 100
    assert _run("Hi.", "--seed", "-1", "-o", str(a)).exit_code == 2


# ------------------------------------------------------------------------- server


def test_server_with_a_model_that_cannot_speak(text_model):
    from serverkit import run_server

    with run_server(parallel=1, tts_model=str(text_model)) as live:
        r = httpx.post(live.url + "/tts", json={"input": "Hello."}, timeout=60)
        assert r.status_code == 501
        err = r.json()["error"]
        assert err["type"] == "not_supported_error" and "cannot speak" in err["message"]
        r = httpx.post(
            live.v1 + "/audio/speech", json={"model": "tts-1", "input": "Hi", "voice": "alloy"}
        )
        assert r.status_code == 501 and "cannot speak" in r.json()["error"]["message"]
