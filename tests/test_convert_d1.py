"""LiquidAI d1 (lfm2-d1) and d1-omni (lfm2-d1-omni): the GGUF layout, and what the pinned
llama.cpp does with it (d1 loads and decodes as it is; d1-omni's head needs a trunk-only copy)."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from llama_cpp import mtmd_cpp as mtmd
from llamactl.converters import ConvertError, convert
from llamactl.converters.safetensors_io import SafetensorsFile
from synthetic_checkpoints import (
    OMNI_TEMPERATURES,
    cached,
    read_gguf,
    read_tensor,
    vocab_size,
    write_trunk_copy,
)

from llamactl.core.errors import ModelLoadError
from llamactl.engine.engine import Engine, EngineConfig, GenerationRequest
from llamactl.engine.model import Model
from llamactl.engine.types import SamplingParams, TextDelta


@pytest.fixture(scope="module")
def d1(tmp_path_factory):
    """lfm2-d1 from a bf16, 2-shard checkpoint, as f16, with its mmproj."""
    src = cached(tmp_path_factory, "lfm2-d1", bf16=True, shards=2)
    out = tmp_path_factory.mktemp("d1_out") / "d1.gguf"
    model = convert(src, out, outtype="f16")
    proj = convert(src, out, outtype="f16", mmproj=True)
    return src, model, proj


@pytest.fixture(scope="module")
def omni(tmp_path_factory):
    src = cached(tmp_path_factory, "lfm2-d1-omni")
    out = tmp_path_factory.mktemp("omni_out") / "omni.gguf"
    return src, convert(src, out, outtype="f32")


def top_logprobs(path, text: str) -> list[tuple[int, float]]:
    """A one-token greedy decode through the engine: the top log-probabilities after `text`."""
    model = Model(path)
    prompt = model.tokenize(text, add_special=False)
    request = GenerationRequest(prompt, SamplingParams(temperature=0.0), max_tokens=1, logprobs=5)
    with Engine(model, EngineConfig(n_parallel=1, n_ctx=256, n_batch=64)) as engine:
        deltas = [e for e in engine.submit(request) if isinstance(e, TextDelta) and e.logprobs]
    model.close()
    return [(t.token, t.logprob) for t in deltas[0].logprobs[0][1]]


# ---------------------------------------------------------------------- lfm2-d1
def test_d1_layout(d1):
    _, result, _ = d1
    meta, tensors = read_gguf(result.outfile)
    assert meta["general.architecture"] == "lfm2" and meta["general.type"] == "model"
    assert meta["lfm2.decision.type"] == "lfm2-d1"
    assert meta["lfm2.block_count"] == 2 and meta["lfm2.embedding_length"] == 64
    assert meta["lfm2.feed_forward_length"] == 128  # block_ff_dim 192, auto-adjusted
    assert meta["lfm2.attention.head_count_kv"] == [0, 2]  # 0 on the convolution layer
    assert meta["lfm2.shortconv.l_cache"] == 3 and meta["lfm2.vocab_size"] == vocab_size("lfm2")
    assert meta["general.file_type"] == 1  # MOSTLY_F16
    assert meta["tokenizer.ggml.model"] == "gpt2" and meta["tokenizer.ggml.pre"] == "lfm2"
    assert meta["tokenizer.ggml.bos_token_id"] == 1 and meta["tokenizer.ggml.add_bos_token"]
    assert meta["tokenizer.ggml.eos_token_id"] == 7
    assert len(meta["tokenizer.ggml.tokens"]) == vocab_size("lfm2")
    assert meta["tokenizer.ggml.tokens"][-1].startswith("[PAD")
    assert meta["lfm2.decision.temperature.choice"] == pytest.approx(1.25)
    assert meta["lfm2.decision.temperature.noul"] == pytest.approx(0.8)
    # the default template and systemone; the speech-task template stays out
    assert meta["tokenizer.chat_templates"] == ["systemone"]
    assert "tokenizer.chat_template.asr" not in meta
    assert meta["tokenizer.chat_template.systemone"].startswith("<|startoftext|><|im_start|>")
    assert tensors["token_embd.weight"] == ((64, vocab_size("lfm2")), "F16")
    assert tensors["blk.0.shortconv.conv.weight"] == ((3, 64), "F32")
    assert tensors["blk.1.attn_q_norm.weight"] == ((16,), "F32")
    assert tensors["token_embd_norm.weight"] == ((64,), "F32")
    assert "output.weight" not in tensors  # tied to the embeddings
    assert not any(n.startswith(("v.", "mm.")) for n in tensors)
    assert result.loads_natively and not result.head_tensors


@pytest.mark.slow
def test_d1_loads_and_decodes_in_llama_cpp(d1):
    _, result, _ = d1
    model = Model(result.outfile)
    assert model.info.architecture == "lfm2"
    assert model.tokenize(" A yes No", add_special=False) == [
        model.tokenize(t, add_special=False)[0] for t in (" A", " yes", " No")
    ]
    model.close()
    top = top_logprobs(result.outfile, "<|im_start|>user\nPick A or B<|im_end|>\n")
    assert len(top) == 5 and all(np.isfinite(lp) and lp < 0 for _, lp in top)


@pytest.mark.slow
def test_d1_mmproj_loads_in_mtmd_and_encodes_an_image(d1):
    _, result, proj = d1
    meta, tensors = read_gguf(proj.outfile)
    assert proj.outfile.name == "mmproj-d1.gguf"
    assert meta["general.architecture"] == "clip" and meta["clip.projector_type"] == "lfm2"
    assert meta["clip.vision.image_resize_algo"] == "bilinear"  # preprocessor resample 2
    assert meta["clip.vision.projection_dim"] == 64 and meta["clip.vision.image_size"] == 256
    assert tensors["v.patch_embd.weight"] == ((16, 16, 3, 32), "F16")
    assert {"mm.input_norm.weight", "mm.1.weight", "mm.2.weight"} <= set(tensors)
    model = Model(result.outfile)
    n_tokens, embd = encode_image(model, proj.outfile)
    assert n_tokens > 0 and embd.shape == (n_tokens, 64) and np.isfinite(embd).all()
    model.close()


def encode_image(model: Model, mmproj_path) -> tuple[int, np.ndarray]:
    """mtmd: load the projector for `model`, encode a small random image."""
    params = mtmd.mtmd_context_params_default()
    params.use_gpu, params.n_threads = False, 1
    ctx = mtmd.mtmd_init_from_file(str(mmproj_path).encode(), model.handle, params)
    assert ctx, "mtmd refused the mmproj"
    try:
        pixels = np.random.default_rng(0).integers(0, 255, (64, 96, 3), dtype=np.uint8)
        bitmap = mtmd.mtmd_bitmap_init(96, 64, (ctypes.c_uint8 * pixels.size)(*pixels.ravel()))
        chunks = mtmd.mtmd_input_chunks_init()
        text = b"see " + mtmd.mtmd_default_marker()
        inp = mtmd.mtmd_input_text(text, len(text), False, True)
        bitmaps = (mtmd.mtmd_bitmap_p_ctypes * 1)(bitmap)
        assert mtmd.mtmd_tokenize(ctx, chunks, ctypes.byref(inp), bitmaps, 1) == 0
        image = next(
            c
            for c in (mtmd.mtmd_input_chunks_get(chunks, i) for i in range(2))
            if mtmd.mtmd_input_chunk_get_type(c) == mtmd.MTMD_INPUT_CHUNK_TYPE_IMAGE
        )
        n = mtmd.mtmd_input_chunk_get_n_tokens(image)
        assert mtmd.mtmd_encode_chunk(ctx, image) == 0
        out = np.ctypeslib.as_array(mtmd.mtmd_get_output_embd(ctx), shape=(n * model.info.n_embd,))
        embd = out.reshape(n, model.info.n_embd).copy()
        mtmd.mtmd_input_chunks_free(chunks)
        mtmd.mtmd_bitmap_free(bitmap)
        return n, embd
    finally:
        mtmd.mtmd_free(ctx)


# ----------------------------------------------------------------- lfm2-d1-omni
def test_d1_omni_layout(omni):
    src, result = omni
    meta, tensors = read_gguf(result.outfile)
    assert meta["general.architecture"] == "lfm2"
    assert meta["lfm2.decision.type"] == "lfm2-d1-omni"
    assert meta["lfm2.block_count"] == 3 and meta["lfm2.decision.block_count"] == 1
    assert meta["lfm2.attention.causal"] is False
    assert meta["lfm2.feed_forward_length"] == [128, 128, 256]  # head MLP is 4 x hidden
    assert meta["lfm2.attention.head_count_kv"] == [0, 2, 4]  # head KV heads = head count
    assert meta["tokenizer.ggml.add_bos_token"] is False
    expected = {
        "choice": 1.0,
        "choice.2": 1.7465,
        "choice.3_5": 1.3999,
        "choice.6_10": 1.1751,
        "choice.11": 1.3725,
        "noul.2": 1.6663,
        "score.3_5": 1.7301,
    }
    got = {k.split("temperature.")[1]: v for k, v in meta.items() if ".temperature." in k}
    assert got == pytest.approx(expected) and len(OMNI_TEMPERATURES) == len(expected)
    assert tensors["token_types.weight"] == ((64, 3), "F32")
    assert tensors["blk.2.attn_qkv.weight"] == ((64, 192), "F32")
    assert tensors["blk.2.attn_qkv.bias"] == ((192,), "F32")
    assert tensors["blk.2.ffn_up.weight"] == ((64, 256), "F32")
    assert tensors["cls.output.weight"] == ((64, 1), "F32")
    assert tensors["cls.output.bias"] == ((1,), "F32")
    assert {"cls.weight", "cls.bias", "cls.norm.weight", "cls.norm.bias"} <= set(tensors)
    assert not any("vision" in n or "audio" in n for n in tensors)
    st = SafetensorsFile(src / "model.safetensors")
    np.testing.assert_array_equal(
        read_tensor(result.outfile, "blk.2.attn_qkv.weight"),
        st.load("head.head.layers.0.attn.qkv.weight"),
    )
    assert len(result.head_tensors) == 12 + 7
    assert not result.loads_natively


@pytest.mark.slow
def test_d1_omni_needs_a_trunk_only_copy(omni, tmp_path):
    _, result = omni
    with pytest.raises(ModelLoadError):
        Model(result.outfile)  # llama.cpp's lfm2 does not know the head blocks
    trunk = tmp_path / "trunk.gguf"
    dropped = write_trunk_copy(result.outfile, trunk)
    assert set(dropped) == set(result.head_tensors)
    meta, tensors = read_gguf(trunk)
    assert meta["lfm2.block_count"] == 2 and meta["lfm2.feed_forward_length"] == [128, 128]
    assert not any(n.startswith(("cls", "token_types", "blk.2.")) for n in tensors)
    top = top_logprobs(trunk, "<|startoftext|><|reserved_7|>state<|reserved_9|><|mask|>")
    assert len(top) == 5 and all(np.isfinite(lp) for _, lp in top)


def test_d1_omni_mmproj_is_refused_clearly(tmp_path_factory, tmp_path):
    src = cached(tmp_path_factory, "lfm2-d1-omni")
    with pytest.raises(ConvertError, match="d1omni_v / d1omni_a"):
        convert(src, tmp_path / "omni.gguf", mmproj=True)
    assert list(tmp_path.iterdir()) == []
