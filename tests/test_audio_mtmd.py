"""The llama.cpp `mtmd` speech backend: its loading path and its errors.

These tests drive the real loading code (GGUF checks, `mtmd_get_cap_from_file`-level
validation, `mtmd_init_from_file` with the embedded text model) into each way it can fail, and
check the ASR prompt it sends; tests/test_asr_mtmd.py runs a model that hears.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llamactl.core.errors import ModelLoadError, ModelNotFoundError
from llamactl.engine.audio.load import load_transcriber
from llamactl.engine.audio.mtmd import MtmdTranscriber, asr_messages, check_mmproj

MODEL_FIXTURES = {"text_model"}  # fixtures that load a model: users are slow


@pytest.fixture(scope="module")
def text_model() -> Path:
    import os

    from llamactl.config import load_settings
    from llamactl.models import resolve_model

    return Path(resolve_model(load_settings({}, config_path=os.devnull)).path)


def _mmproj(path: Path, **flags) -> Path:
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


def test_missing_files(tmp_path, text_model):
    with pytest.raises(ModelNotFoundError, match="speech model file not found"):
        MtmdTranscriber(tmp_path / "none.gguf", tmp_path / "mmproj.gguf")
    with pytest.raises(ModelNotFoundError, match="mmproj file not found"):
        MtmdTranscriber(text_model, tmp_path / "mmproj.gguf")


def test_mmproj_that_is_not_a_projector(tmp_path, text_model):
    junk = tmp_path / "mmproj-junk.gguf"
    junk.write_text("<html>not found</html>")
    with pytest.raises(ModelLoadError, match="not a GGUF file"):
        MtmdTranscriber(text_model, junk)
    with pytest.raises(ModelLoadError, match="not an mmproj"):
        check_mmproj(text_model)


def test_vision_only_projector_is_refused(tmp_path, text_model):
    vision = _mmproj(
        tmp_path / "mmproj-vision.gguf",
        **{"clip.has_vision_encoder": True, "clip.has_audio_encoder": False},
    )
    with pytest.raises(ModelLoadError, match="no audio encoder .a vision-only projector"):
        MtmdTranscriber(text_model, vision)


def test_llama_cpp_refusal_is_explained(tmp_path, text_model):
    broken = _mmproj(
        tmp_path / "mmproj-audio.gguf",
        **{"clip.has_audio_encoder": True, "clip.projector_type": "ultravox"},
    )
    assert check_mmproj(broken) == "ultravox"
    with pytest.raises(ModelLoadError) as err:
        MtmdTranscriber(text_model, broken, threads=1)
    message = str(err.value)
    assert "could not load mmproj-audio.gguf" in message and "Key not found" in message


def test_loader_finds_the_mmproj_beside_the_model(tmp_path, text_model):
    model = tmp_path / "speech.gguf"
    model.symlink_to(text_model)
    _mmproj(tmp_path / "mmproj-speech.gguf", **{"clip.has_audio_encoder": True})
    with pytest.raises(ModelLoadError, match="mmproj-speech.gguf"):
        load_transcriber(model, threads=1)


def test_asr_prompt_puts_the_audio_after_the_request():
    messages = asr_messages("<__media__>", language="en", prompt="names: Stella")
    assert messages[0]["role"] == "system"
    user = messages[1]["content"]
    assert user.endswith("<__media__>") and "language: en" in user and "Stella" in user
