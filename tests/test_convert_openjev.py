"""OpenJev, lev, kev, h2o-lightning and MiniCPM-OCR-Jev (Qwen3.5 trunks): the GGUF layout,
LoRA merging, heads, and which files the pinned llama.cpp loads as they are."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from llamactl.converters import CheckpointError, ConvertError, convert, loads_natively
from llamactl.converters.safetensors_io import SafetensorsFile
from synthetic_checkpoints import (
    KEV_HEAD_DIM,
    KEV_TEMPERATURE,
    cached,
    read_gguf,
    read_tensor,
    vocab_size,
    write_trunk_copy,
)
from test_convert_d1 import encode_image, top_logprobs

from llamactl.core.errors import ModelLoadError
from llamactl.engine.model import Model

CHAT = "<|im_start|>user\nPick A or B<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"


@pytest.fixture(scope="module")
def out_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("openjev_out")


@pytest.fixture(scope="module")
def openjev(tmp_path_factory, out_dir):
    src = cached(tmp_path_factory, "openjev")
    return src, convert(src, out_dir / "openjev.gguf", outtype="q8_0")


@pytest.fixture(scope="module")
def minicpm(tmp_path_factory, out_dir):
    src = cached(tmp_path_factory, "openbmb-minicpm-ocr-jev")
    return src, convert(src, out_dir / "minicpm.gguf", outtype="f16")


@pytest.fixture(scope="module")
def lev(tmp_path_factory, out_dir):
    base = cached(tmp_path_factory, "qwen35-base")
    src = cached(tmp_path_factory, "lev")
    return src, base, convert(src, out_dir / "lev.gguf", outtype="f32", base=base)


@pytest.fixture(scope="module")
def kev(tmp_path_factory, out_dir):
    base = cached(tmp_path_factory, "qwen35-base")
    src = cached(tmp_path_factory, "kev")
    return src, convert(src, out_dir / "kev.gguf", outtype="f16", base=base)


# ----------------------------------------------------------------------- openjev
def test_openjev_qwen35_layout(openjev):
    _, result = openjev
    meta, tensors = read_gguf(result.outfile)
    assert meta["general.architecture"] == "qwen35" and meta["qwen35.decision.type"] == "openjev"
    assert meta["general.file_type"] == 7  # MOSTLY_Q8_0
    assert meta["qwen35.full_attention_interval"] == 2
    assert meta["qwen35.ssm.group_count"] == 2 and meta["qwen35.ssm.time_step_rank"] == 4
    assert meta["qwen35.ssm.inner_size"] == 64 and meta["qwen35.ssm.state_size"] == 16
    assert meta["qwen35.ssm.conv_kernel"] == 4
    assert meta["qwen35.rope.dimension_count"] == 8
    assert meta["qwen35.rope.dimension_sections"] == [2, 1, 1, 0]
    assert meta["qwen35.attention.key_length"] == 32
    assert meta["tokenizer.ggml.pre"] == "qwen35"
    assert meta["tokenizer.ggml.eos_token_id"] == meta["tokenizer.ggml.tokens"].index("<|im_end|>")
    temps = {k.split("temperature.")[1]: v for k, v in meta.items() if ".temperature." in k}
    assert temps == pytest.approx({"choice": 1.2, "score": 0.9, "noul": 1.1, "choice.11": 1.3})
    assert "Answer with the letter" in meta["tokenizer.chat_template.systemone"]
    assert "tokenizer.chat_template" in meta  # the model's own chat template is kept
    assert tensors["blk.0.attn_qkv.weight"] == ((64, 128), "Q8_0")
    assert tensors["blk.0.attn_gate.weight"] == ((64, 64), "Q8_0")
    assert tensors["blk.0.ssm_conv1d.weight"] == ((4, 128), "F32")
    assert tensors["blk.0.ssm_a"] == ((4,), "F32")
    assert tensors["blk.0.ssm_dt.bias"] == ((4,), "F32")
    assert tensors["blk.0.ssm_norm.weight"] == ((16,), "F32")
    assert tensors["blk.0.ssm_beta.weight"] == ((64, 4), "Q8_0")
    assert tensors["blk.1.attn_q.weight"] == ((64, 128), "Q8_0")  # query and gate
    assert tensors["blk.1.post_attention_norm.weight"] == ((64,), "F32")
    assert tensors["output.weight"] == ((64, vocab_size("qwen")), "Q8_0")
    assert not any(n.startswith(("mtp", "v.")) or "nextn" in n for n in tensors)


def test_openjev_transforms_match_llama_cpp_conventions(openjev, tmp_path):
    src, _ = openjev
    out = convert(src, tmp_path / "f32.gguf", outtype="f32").outfile
    st = SafetensorsFile(src / "model.safetensors")
    p = "model.language_model.layers."
    a_log = st.load(p + "0.linear_attn.A_log")
    # value heads: grouped by key head in HF [k0v0 k0v1 k1v0 k1v1], tiled in ggml
    tiled = [0, 2, 1, 3]
    np.testing.assert_allclose(read_tensor(out, "blk.0.ssm_a"), -np.exp(a_log)[tiled], rtol=1e-6)
    norm = st.load(p + "0.input_layernorm.weight")
    np.testing.assert_allclose(read_tensor(out, "blk.0.attn_norm.weight"), norm + 1, rtol=1e-6)
    ssm_norm = st.load(p + "0.linear_attn.norm.weight")  # the gated norm keeps its weight
    np.testing.assert_array_equal(read_tensor(out, "blk.0.ssm_norm.weight"), ssm_norm)
    z = st.load(p + "0.linear_attn.in_proj_z.weight").reshape(4, 16, 64)
    np.testing.assert_array_equal(
        read_tensor(out, "blk.0.attn_gate.weight"), z[tiled].reshape(64, 64)
    )


@pytest.mark.slow
def test_openjev_loads_and_decodes_in_llama_cpp(openjev):
    _, result = openjev
    assert result.loads_natively and loads_natively("openjev")
    top = top_logprobs(result.outfile, CHAT)
    assert len(top) == 5 and all(np.isfinite(lp) for _, lp in top)


@pytest.mark.slow
def test_openjev_mmproj(openjev, out_dir):
    src, result = openjev
    proj = convert(src, out_dir / "openjev.gguf", outtype="f16", mmproj=True)
    meta, tensors = read_gguf(proj.outfile)
    assert meta["clip.projector_type"] == "qwen3vl_merger"
    assert meta["clip.vision.spatial_merge_size"] == 2 and meta["clip.vision.image_size"] == 128
    assert tensors["v.patch_embd.weight"] == ((16, 16, 3, 32), "F16")
    assert tensors["v.patch_embd.weight.1"] == ((16, 16, 3, 32), "F16")
    assert {"mm.0.weight", "mm.2.weight", "v.post_ln.weight", "v.blk.0.attn_qkv.weight"} <= set(
        tensors
    )
    assert "clip.vision.image_max_pixels" not in meta  # only MiniCPM-OCR-Jev keeps its budget
    model = Model(result.outfile)
    n, embd = encode_image(model, proj.outfile)
    assert embd.shape == (n, 64) and np.isfinite(embd).all()
    model.close()


@pytest.mark.slow
def test_openjev_on_qwen3_loads(tmp_path_factory, tmp_path):
    result = convert(cached(tmp_path_factory, "openjev-qwen3"), tmp_path / "q3.gguf")
    meta, tensors = read_gguf(result.outfile)
    assert meta["general.architecture"] == "qwen3" and meta["tokenizer.ggml.pre"] == "qwen2"
    assert meta["qwen3.decision.type"] == "openjev"
    assert "output.weight" not in tensors  # tied embeddings
    Model(result.outfile).close()
    with pytest.raises(ConvertError, match="no vision tower"):
        convert(cached(tmp_path_factory, "openjev-qwen3"), tmp_path / "q3.gguf", mmproj=True)


# ----------------------------------------------------------------- H2O-Lightning
@pytest.mark.slow
def test_h2o_lightning_layout_and_contract(tmp_path_factory, out_dir):
    src = cached(tmp_path_factory, "h2o-lightning")
    result = convert(src, out_dir / "h2o.gguf", outtype="q8_0")
    meta, tensors = read_gguf(result.outfile)
    assert meta["qwen35.decision.type"] == "h2o-lightning"
    temps = {k.rsplit(".", 1)[1]: v for k, v in meta.items() if ".decision.temperature." in k}
    assert temps == pytest.approx({"choice": 1.5, "score": 1.5, "noul": 1.5})
    assert meta["qwen35.decision.noul_floor"] == pytest.approx(0.9)
    template = meta["tokenizer.chat_template.systemone"]
    assert "record: " in template and "Answer:" in template and "the statement holds" in template
    assert result.loads_natively and "output.weight" in tensors
    Model(result.outfile).close()  # a plain causal LM: llama.cpp loads it as it is


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"noul_floor": 0.4}, "noul_floor", "must be in (0.5, 1), or 0 (off)"),
        ({"temperature": 0}, "temperature", "outside [0.05, 20]"),
        ({"labels": ["1", "2"]}, "labels", "the letters A, B, C... in order"),
        ({"prompt": {"enable_thinking": True}}, "prompt.enable_thinking", "must be false"),
        ({"prompt": {"layout": "xml"}}, "prompt.layout", "is not plain or markdown"),
    ],
)
def test_h2o_lightning_contract_mistakes_name_the_field(
    tmp_path_factory, tmp_path, change, field, message
):
    src = tmp_path / "h2o"
    shutil.copytree(cached(tmp_path_factory, "h2o-lightning"), src)
    contract = json.loads((src / "serve_config.json").read_text())
    (src / "serve_config.json").write_text(json.dumps(contract | change))
    with pytest.raises(CheckpointError) as err:
        convert(src, tmp_path / "out.gguf")
    assert "serve_config.json" in str(err.value) and field in str(err.value)
    assert message in str(err.value)
    assert not (tmp_path / "out.gguf").exists()


def test_h2o_lightning_without_a_floor_writes_none(tmp_path_factory, tmp_path):
    src = tmp_path / "h2o"
    shutil.copytree(cached(tmp_path_factory, "h2o-lightning"), src)
    contract = json.loads((src / "serve_config.json").read_text())
    (src / "serve_config.json").write_text(json.dumps(contract | {"noul_floor": 0}))
    meta, _ = read_gguf(convert(src, tmp_path / "out.gguf").outfile)
    assert "qwen35.decision.noul_floor" not in meta


# --------------------------------------------------------------- MiniCPM-OCR-Jev
def test_minicpm_ocr_jev_layout(minicpm):
    src, result = minicpm
    meta, tensors = read_gguf(result.outfile)
    assert meta["qwen35.decision.type"] == "openbmb-minicpm-ocr-jev"
    assert meta["qwen35.embedding_length_out"] == 2
    assert meta["qwen35.classifier.output_labels"] == ["mismatch", "match"]
    assert tensors["cls.output.weight"] == ((64, 2), "F16")
    assert "output.weight" not in tensors  # no LM head, none invented
    assert "OCR text:" in meta["tokenizer.chat_template.systemone"]
    assert result.head_tensors == ["cls.output.weight"] and not result.loads_natively


@pytest.mark.slow
def test_minicpm_ocr_jev_needs_a_trunk_only_copy(minicpm, tmp_path):
    _, result = minicpm
    with pytest.raises(ModelLoadError):
        Model(result.outfile)  # "wrong number of tensors": qwen35 loads no cls.output
    trunk = tmp_path / "trunk.gguf"
    assert write_trunk_copy(result.outfile, trunk) == ["cls.output.weight"]
    meta, tensors = read_gguf(trunk)  # the engine's own copy: same plan, same code
    assert "qwen35.embedding_length_out" not in meta and "cls.output.weight" not in tensors
    top = top_logprobs(trunk, "<|im_start|>user\nOCR text:\nhello<|im_end|>\n")
    assert all(np.isfinite(lp) for _, lp in top)


@pytest.mark.slow
def test_minicpm_ocr_jev_mmproj_keeps_the_image_budget(minicpm, out_dir, tmp_path_factory):
    src, _ = minicpm
    proj = convert(src, out_dir / "minicpm.gguf", outtype="f16", mmproj=True)
    meta, _ = read_gguf(proj.outfile)
    assert meta["clip.vision.image_max_pixels"] == 16777216  # 16384 merged 32x32 tokens
    assert meta["clip.vision.image_min_pixels"] == 65536
    text = convert(cached(tmp_path_factory, "openjev"), out_dir / "text.gguf", outtype="f16")
    model = Model(text.outfile)  # same trunk shape: the projector pairs with it
    n, embd = encode_image(model, proj.outfile)
    assert n > 0 and np.isfinite(embd).all()
    model.close()


def test_minicpm_ocr_jev_labels_must_match_the_head(tmp_path_factory, tmp_path):
    dst = tmp_path / "minicpm"
    shutil.copytree(cached(tmp_path_factory, "openbmb-minicpm-ocr-jev"), dst)
    config = json.loads((dst / "config.json").read_text())
    config["id2label"] = {"0": "only"}
    (dst / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"config.json: id2label: names 1 classes, .* 2"):
        convert(dst, tmp_path / "x.gguf")


# --------------------------------------------------------------------------- lev
def test_lev_merges_the_lora_into_the_base(lev):
    src, base, result = lev
    meta, tensors = read_gguf(result.outfile)
    assert meta["qwen35.decision.type"] == "lev"
    temps = {k.split("temperature.")[1]: v for k, v in meta.items() if ".temperature." in k}
    assert temps == pytest.approx(
        {"choice.small": 1.1, "choice.mid": 1.2, "choice.large": 1.3, "score": 0.8, "noul": 1.05}
    )
    assert "# Evidence" in meta["tokenizer.chat_template.systemone"]
    w = SafetensorsFile(base / "model.safetensors")
    ad = SafetensorsFile(src / "adapter_model.safetensors")
    stem = "model.language_model.layers.0.mlp.up_proj"
    a = ad.load(f"base_model.model.{stem}.lora_A.weight")
    b = ad.load(f"base_model.model.{stem}.lora_B.weight")
    merged = w.load(f"{stem}.weight") + (8 / 4) * (b @ a)  # alpha / r
    np.testing.assert_allclose(
        read_tensor(result.outfile, "blk.0.ffn_up.weight"), merged, rtol=1e-5
    )
    untouched = read_tensor(result.outfile, "blk.0.ffn_gate.weight")
    np.testing.assert_array_equal(
        untouched, w.load("model.language_model.layers.0.mlp.gate_proj.weight")
    )
    # the merged QKV projection is then value-head reordered like any Qwen3.5 weight
    qkv = "model.language_model.layers.0.linear_attn.in_proj_qkv"
    pre = f"base_model.model.{qkv}"
    full = w.load(f"{qkv}.weight") + 2 * (
        ad.load(f"{pre}.lora_B.weight") @ ad.load(f"{pre}.lora_A.weight")
    )
    v = full[64:].reshape(2, 2, 16, 64).swapaxes(0, 1).reshape(64, 64)
    got = read_tensor(result.outfile, "blk.0.attn_qkv.weight")
    np.testing.assert_allclose(got, np.concatenate([full[:64], v]), rtol=1e-5, atol=1e-7)
    assert len(tensors) == 28


@pytest.mark.slow
def test_lev_loads_and_decodes(lev):
    _, _, result = lev
    assert result.loads_natively
    top = top_logprobs(result.outfile, CHAT)
    assert all(np.isfinite(lp) for _, lp in top)


def test_an_adapter_needs_its_base(tmp_path_factory, tmp_path):
    src = cached(tmp_path_factory, "lev")
    with pytest.raises(ConvertError, match=r"pass its base model \(Qwen/Qwen3.5-4B\)"):
        convert(src, tmp_path / "x.gguf")
    with pytest.raises(ConvertError, match="--base is for LoRA adapters"):
        convert(cached(tmp_path_factory, "openjev-qwen3"), tmp_path / "x.gguf", base=src)
    assert list(tmp_path.iterdir()) == []


def test_a_lora_that_is_not_plain_is_refused(tmp_path_factory, tmp_path):
    dst = tmp_path / "lev"
    shutil.copytree(cached(tmp_path_factory, "lev"), dst)
    config = json.loads((dst / "adapter_config.json").read_text())
    config["use_dora"] = True
    (dst / "adapter_config.json").write_text(json.dumps(config))
    base = cached(tmp_path_factory, "qwen35-base")
    with pytest.raises(CheckpointError, match=r"adapter_config.json: use_dora: only a plain LoRA"):
        convert(dst, tmp_path / "x.gguf", base=base)


def test_a_lora_for_another_base_is_refused(tmp_path_factory, tmp_path):
    lev = cached(tmp_path_factory, "lev")
    other = cached(tmp_path_factory, "openjev-qwen3")  # different shapes
    with pytest.raises(CheckpointError, match=r"adapter_model.safetensors: .*do not fit|no base"):
        convert(lev, tmp_path / "x.gguf", base=other)


# --------------------------------------------------------------------------- kev
def test_kev_pointer_head(kev):
    src, result = kev
    meta, tensors = read_gguf(result.outfile)
    assert meta["qwen35.decision.type"] == "kev"
    assert meta["qwen35.embedding_length_out"] == 2 * KEV_HEAD_DIM
    for name in ("choice", "score", "noul"):
        assert meta[f"qwen35.decision.temperature.{name}"] == pytest.approx(KEV_TEMPERATURE)
    assert tensors["cls.output.weight"] == ((64, 2 * KEV_HEAD_DIM), "F16")
    assert tensors["cls.output.bias"] == ((2 * KEV_HEAD_DIM,), "F32")
    assert "<|box_start|>" in meta["tokenizer.chat_template.systemone"]
    assert sorted(result.head_tensors) == ["cls.output.bias", "cls.output.weight"]


@pytest.mark.slow
def test_kev_needs_a_trunk_only_copy(kev, tmp_path):
    _, result = kev
    with pytest.raises(ModelLoadError):
        Model(result.outfile)
    write_trunk_copy(result.outfile, tmp_path / "trunk.gguf")
    top = top_logprobs(tmp_path / "trunk.gguf", "<|fim_prefix|>x<|fim_middle|>y<|box_end|>")
    assert all(np.isfinite(lp) for _, lp in top)


def test_kev_head_must_match_its_training_config(tmp_path_factory, tmp_path):
    dst = tmp_path / "kev"
    shutil.copytree(cached(tmp_path_factory, "kev"), dst)
    (dst / "training_config.json").write_text(json.dumps({"args": {"head_dim": 4}}))
    base = cached(tmp_path_factory, "qwen35-base")
    with pytest.raises(CheckpointError, match=r"training_config.json: args.head_dim: is 4"):
        convert(dst, tmp_path / "x.gguf", base=base)
