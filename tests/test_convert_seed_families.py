"""The families llama.cpp b11434 lacks (lfm2-d1, d1-omni, MiniCPM-OCR-Jev, h2o-lightning): the
keys and tensors that follow the seed's description rather than a reference converter (see
docs/convert.md, "Families without a reference"), each checked against that description."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from llamactl.converters import CheckpointError, convert
from llamactl.converters.safetensors_io import SafetensorsFile
from synthetic_checkpoints import QWEN_PREPROCESSOR, QWEN_VISION, cached, read_gguf, read_tensor


@pytest.fixture(scope="module")
def minicpm(tmp_path_factory):
    src = cached(tmp_path_factory, "openbmb-minicpm-ocr-jev")
    out = tmp_path_factory.mktemp("seed_minicpm") / "minicpm.gguf"
    return src, convert(src, out, outtype="f32").outfile, convert(src, out, mmproj=True).outfile


def test_minicpm_score_weight_is_cls_output_with_its_classes(minicpm):
    """`score.weight` -> `cls.output` (values as they are), `embedding_length_out` = number of
    classes, `classifier.output_labels` from id2label in class order."""
    src, model, _ = minicpm
    meta, tensors = read_gguf(model)
    score = SafetensorsFile(src / "model.safetensors").load("score.weight")
    np.testing.assert_array_equal(read_tensor(model, "cls.output.weight"), score)
    labels = meta["qwen35.classifier.output_labels"]
    assert meta["qwen35.embedding_length_out"] == len(labels) == score.shape[0]
    id2label = json.loads((src / "config.json").read_text())["id2label"]
    assert labels == [id2label[str(i)] for i in range(len(id2label))]
    assert "cls.output.bias" not in tensors and "score.weight" not in tensors


def test_minicpm_mmproj_keeps_16384_merged_tokens_per_image(minicpm):
    """The preprocessor's budget, not mtmd's Qwen-VL default: max_pixels / (patch * merge)^2
    merged tokens per image."""
    _, _, mmproj = minicpm
    meta, _ = read_gguf(mmproj)
    side = QWEN_PREPROCESSOR["patch_size"] * QWEN_PREPROCESSOR["merge_size"]
    assert meta["clip.vision.image_max_pixels"] // side**2 == 16384
    assert meta["clip.vision.image_min_pixels"] == QWEN_PREPROCESSOR["min_pixels"]
    assert meta["clip.vision.spatial_merge_size"] == QWEN_VISION["spatial_merge_size"]


def test_d1_omni_scorer_and_limits_follow_the_seed(tmp_path_factory, tmp_path):
    """`head.scorer.{norm,dense,out}` -> `cls.norm`, `cls`, `cls.output`, `head.type_emb` ->
    `token_types`; a checkpoint whose budgets are not the seed's 16384 / 896 / 15360 is not
    converted (the engine's budgets are those)."""
    src = cached(tmp_path_factory, "lfm2-d1-omni")
    out = convert(src, tmp_path / "omni.gguf", outtype="f32").outfile
    st = SafetensorsFile(src / "model.safetensors")
    for hf, name in (
        ("head.scorer.out.weight", "cls.output.weight"),
        ("head.scorer.dense.weight", "cls.weight"),
        ("head.scorer.norm.weight", "cls.norm.weight"),
        ("head.type_emb.weight", "token_types.weight"),
    ):
        np.testing.assert_array_equal(read_tensor(out, name), st.load(hf))
    dst = tmp_path / "omni"
    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    (dst / "config.json").write_text(json.dumps(config | {"max_length": 8192}))
    with pytest.raises(CheckpointError, match="max_length: d1-omni is converted for 16384"):
        convert(dst, tmp_path / "x.gguf")


def test_h2o_lightning_writes_its_contract_as_decision_keys(tmp_path_factory, tmp_path):
    src = cached(tmp_path_factory, "h2o-lightning")
    meta, _ = read_gguf(convert(src, tmp_path / "h2o.gguf").outfile)
    contract = json.loads((src / "serve_config.json").read_text())
    temps = {k.split("temperature.")[1]: v for k, v in meta.items() if ".temperature." in k}
    assert temps == pytest.approx(
        dict.fromkeys(("choice", "score", "noul"), contract["temperature"])
    )
    assert meta["qwen35.decision.noul_floor"] == pytest.approx(contract["noul_floor"])
    assert contract["prompt"]["system"] in meta["tokenizer.chat_template.systemone"]


def test_lfm2_d1_mmproj_resize_algo_from_the_preprocessor(tmp_path_factory, tmp_path):
    src = cached(tmp_path_factory, "lfm2-d1")
    resample = json.loads((src / "preprocessor_config.json").read_text()).get("resample")
    meta, _ = read_gguf(convert(src, tmp_path / "d1.gguf", mmproj=True).outfile)
    algo = {1: "lanczos", 2: "bilinear", 3: "bicubic"}
    assert meta["clip.vision.image_resize_algo"] == algo[resample]
