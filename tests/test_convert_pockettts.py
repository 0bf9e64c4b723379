"""The Pocket TTS converter on what users get wrong (no model loads here: tests/test_tts_pocket.py
runs the converted pair in llama.cpp), and the sentencepiece reader it uses."""

from __future__ import annotations

import pytest
from llamactl.converters import convert
from llamactl.converters.example_pockettts import build_pockettts
from llamactl.converters.safetensors_io import SafetensorsFile, save_file
from llamactl.converters.sentencepiece import (
    CONTROL,
    Piece,
    SentencePieceModel,
    read_sentencepiece,
    write_sentencepiece,
)

from llamactl.core.errors import CheckpointError


def test_a_sentencepiece_model_reads_back_as_written(tmp_path):
    model = SentencePieceModel(
        [Piece("<s>", 0.0, CONTROL), Piece("▁hé", -1.5), Piece("llo", -2.25)],
        add_dummy_prefix=False,
        precompiled_charsmap=b"\x00\x01\x02",
        normalizer="nmt_nfkc",
    )
    write_sentencepiece(model, tmp_path / "tokenizer.model")
    again = read_sentencepiece(tmp_path / "tokenizer.model")
    assert again == model


def test_a_file_that_is_not_sentencepiece_is_named(tmp_path):
    (tmp_path / "tokenizer.model").write_bytes(b"\xff\xff\xff")
    with pytest.raises(CheckpointError, match="tokenizer.model: not a sentencepiece model"):
        read_sentencepiece(tmp_path / "tokenizer.model")


def test_the_example_converts_to_both_files(tmp_path):
    ckpt = build_pockettts(tmp_path / "english")
    model = convert(ckpt, tmp_path / "p.gguf")
    mmproj = convert(ckpt, tmp_path / "p.gguf", mmproj=True)
    assert (model.family, model.arch, model.decision_type) == ("pocket-tts", "pockettts", None)
    assert (mmproj.arch, mmproj.kind, mmproj.outfile.name) == ("clip", "mmproj", "mmproj-p.gguf")
    kernels = [t for t in mmproj.tensors if ".seanet." in t.name and t.name.endswith(".weight")]
    assert kernels and all(t.type == "F16" for t in kernels)


def test_a_missing_tokenizer_is_named(tmp_path):
    ckpt = build_pockettts(tmp_path / "p")
    (ckpt / "tokenizer.model").unlink()
    with pytest.raises(CheckpointError, match="tokenizer.model: file not found"):
        convert(ckpt, tmp_path / "p.gguf")
    assert not (tmp_path / "p.gguf").exists()


def test_a_piece_twice_is_refused_before_llama_cpp_sees_it(tmp_path):
    ckpt = build_pockettts(tmp_path / "p")
    model = read_sentencepiece(ckpt / "tokenizer.model")
    model.pieces[6] = model.pieces[5]
    write_sentencepiece(model, ckpt / "tokenizer.model")
    with pytest.raises(CheckpointError, match="is there twice"):
        convert(ckpt, tmp_path / "p.gguf")


def test_a_missing_tensor_is_named(tmp_path):
    ckpt = build_pockettts(tmp_path / "p")
    weights = SafetensorsFile(ckpt / "model.safetensors")
    tensors = {n: weights.load(n) for n in weights.entries if "linear1" not in n}
    weights.close()
    save_file(tensors, ckpt / "model.safetensors")
    with pytest.raises(CheckpointError, match="flow_lm.transformer.layers.0.linear1.weight"):
        convert(ckpt, tmp_path / "p.gguf")
