"""Tiny Hugging Face checkpoints of every family `llamactl convert` knows, built without torch.

Each builder writes a real checkpoint directory (config.json, tokenizer.json and
tokenizer_config.json, safetensors weights, plus the family's own files) with small random
weights, so `convert`, `score` and `chat` can be tried offline (`llamactl convert --example DIR`)
and the test suite can run every family end to end in well under a second.

    from llamactl.converters.examples import build, write_examples
    path = build("llama", out / "llama")                      # any of BUILDERS
    path = build("lfm2-d1", out / "d1", bf16=True, shards=2)
    base = build("qwen35-base", out / "base")                 # for lev / kev adapters
    lev = build("lev", out / "lev", base=base)
    write_examples(out)                                       # one of each, as the CLI does

The tokenizer is a byte-level BPE over all 256 bytes (so any text tokenizes in llama.cpp) with
merges for every label the decision prompts read as one token: A-Z and a-z with and without a
leading space, 00-99, yes/Yes/YES/no/No/NO (with and without a space), plus the special tokens of
the base model (LFM2, Qwen, Llama 3 or Gemma) including the markers the prompts use.
"""

from __future__ import annotations

import io
import json
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .example_pockettts import build_pockettts
from .safetensors_io import SafetensorsFile, save_file

__all__ = [
    "BUILDERS",
    "CHAT_EXAMPLES",
    "DECISION_EXAMPLES",
    "SPEECH_EXAMPLES",
    "FAMILIES",
    "build",
    "write_examples",
]

FAMILIES = (
    "lfm2-d1",
    "lfm2-d1-omni",
    "openbmb-minicpm-ocr-jev",
    "openjev",
    "openjev-qwen3",
    "h2o-lightning",
    "lev",
    "kev",
)
HIDDEN = 64
VOCAB_PAD = 8  # config vocab_size rounds the tokenizer up, as real checkpoints do

# ----------------------------------------------------------------------- tokenizer
LFM2_SPECIAL = [
    "<|pad|>",
    "<|startoftext|>",
    "<|endoftext|>",
    "<|fim_pre|>",
    "<|fim_mid|>",
    "<|fim_suf|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|tool_list_start|>",
    "<|tool_list_end|>",
    "<|tool_call_start|>",
    "<|tool_call_end|>",
    "<|tool_response_start|>",
    "<|tool_response_end|>",
    *(f"<|reserved_{i}|>" for i in range(12)),
    "<|mask|>",
    "<image>",
    "<|image_start|>",
    "<|image_end|>",
    "<|img_thumbnail|>",
]
QWEN_SPECIAL = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
]
LLAMA_SPECIAL = [
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "<|python_tag|>",
]
GEMMA_SPECIAL = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>"]
SPECIALS = {
    "lfm2": LFM2_SPECIAL,
    "qwen": QWEN_SPECIAL,
    "llama": LLAMA_SPECIAL,
    "gemma": GEMMA_SPECIAL,
}
BOS = {"lfm2": "<|startoftext|>", "llama": "<|begin_of_text|>", "gemma": "<bos>"}
LLAMA3_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
    "'<|end_header_id|>\\n\\n' + message['content'] + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% endif %}"
)
GEMMA_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% set role = 'model' if message['role'] == "
    "'assistant' else message['role'] %}{{ '<start_of_turn>' + role + '\\n' + message['content'] "
    "+ '<end_of_turn>\\n' }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<start_of_turn>model\\n' }}{% endif %}"
)
QWEN_ADDED_NORMAL = ["<tool_call>", "</tool_call>", "<think>", "</think>"]
CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
SPLIT_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def byte_table() -> dict[int, str]:
    """GPT-2's byte-to-character table (printable bytes stay, the rest shift past 255)."""
    keep = [*range(33, 127), *range(161, 173), *range(174, 256)]
    table = {b: chr(b) for b in keep}
    for n, b in enumerate(b for b in range(256) if b not in keep):
        table[b] = chr(256 + n)
    return table


def _merges() -> list[tuple[str, str]]:
    sp = byte_table()[ord(" ")]  # 'Ġ'
    letters = [chr(c) for c in (*range(65, 91), *range(97, 123))]
    merges = [(sp, c) for c in letters]
    merges += [(a, b) for a in "0123456789" for b in "0123456789"]
    for word in ("yes", "Yes", "YES", "no", "No", "NO"):
        for i in range(1, len(word)):
            merges.append((word[:i], word[i]))
            merges.append((sp + word[:i], word[i]))
    return list(dict.fromkeys(merges))


def tokenizer_files(kind: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, int]]:
    """(tokenizer.json, tokenizer_config.json, special ids) for an "lfm2", "qwen", "llama" or
    "gemma" vocab (each numbers and flags its special tokens as the real one does)."""
    specials = SPECIALS[kind]
    vocab: dict[str, int] = {}
    added: list[dict[str, Any]] = []

    def add_special(text: str, special: bool = True) -> None:
        vocab[text] = len(vocab)
        added.append(
            {
                "id": vocab[text],
                "content": text,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": not special,
                "special": special,
            }
        )

    first = kind in ("lfm2", "gemma")  # LFM2 and Gemma number their special tokens first
    if first:
        for s in specials:
            add_special(s)
    for byte in range(256):
        vocab[byte_table()[byte]] = len(vocab)
    merges = _merges()
    for left, right in merges:
        vocab.setdefault(left + right, len(vocab))
    if not first:  # Qwen and Llama 3 append them after the BPE vocabulary
        for s in specials:
            add_special(s)
    if kind == "qwen":
        for s in QWEN_ADDED_NORMAL:
            add_special(s, special=False)
    ids = {s: vocab[s] for s in specials}
    post: dict[str, Any]
    if kind in BOS:
        bos = BOS[kind]
        post = {
            "type": "TemplateProcessing",
            "single": [
                {"SpecialToken": {"id": bos, "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}},
            ],
            "pair": [
                {"SpecialToken": {"id": bos, "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}},
                {"Sequence": {"id": "B", "type_id": 1}},
            ],
            "special_tokens": {bos: {"id": bos, "ids": [ids[bos]], "tokens": [bos]}},
        }
    else:
        post = {
            "type": "ByteLevel",
            "add_prefix_space": False,
            "trim_offsets": False,
            "use_regex": False,
        }
    config: dict[str, Any]
    if kind == "lfm2":
        config = {
            "tokenizer_class": "PreTrainedTokenizerFast",  # as LFM2's checkpoints say
            "bos_token": "<|startoftext|>",
            "eos_token": "<|im_end|>",
            "pad_token": "<|pad|>",
            "add_bos_token": True,
            "add_eos_token": False,
            "chat_template": [
                {"name": "default", "template": CHATML},
                {"name": "asr", "template": "{{ 'transcribe' }}"},
            ],
        }
    elif kind == "llama":
        config = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": "<|begin_of_text|>",
            "eos_token": "<|eot_id|>",
            "chat_template": LLAMA3_TEMPLATE,
        }
    elif kind == "gemma":
        config = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": "<bos>",
            "eos_token": "<eos>",
            "pad_token": "<pad>",
            "unk_token": "<unk>",
            "add_bos_token": True,
            "add_eos_token": False,
            "chat_template": GEMMA_TEMPLATE,
        }
    else:
        config = {
            "tokenizer_class": "Qwen2Tokenizer",  # as Qwen's checkpoints say (transformers
            "bos_token": None,  # then needs no config.json to pick the tokenizer)
            "eos_token": "<|im_end|>",
            "pad_token": "<|endoftext|>",
            "add_bos_token": False,
            "chat_template": CHATML,
        }
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {
                    "type": "Split",
                    "pattern": {"Regex": SPLIT_REGEX},
                    "behavior": "Isolated",
                    "invert": False,
                },
                {
                    "type": "ByteLevel",
                    "add_prefix_space": False,
                    "trim_offsets": False,
                    "use_regex": False,
                },
            ],
        },
        "post_processor": post,
        "decoder": {
            "type": "ByteLevel",
            "add_prefix_space": False,
            "trim_offsets": False,
            "use_regex": False,
        },
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": [[a, b] for a, b in merges],
        },
    }
    return tokenizer, config, ids


def vocab_size(kind: str) -> int:
    n = len(tokenizer_files(kind)[0]["model"]["vocab"])
    return n + (-n % VOCAB_PAD)


# ------------------------------------------------------------------------ weights
class _Weights:
    """Random weights in insertion order, with a fixed seed per checkpoint."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.tensors: dict[str, np.ndarray] = {}

    def mat(self, name: str, *shape: int, scale: float = 0.05) -> None:
        self.tensors[name] = (self.rng.standard_normal(shape) * scale).astype(np.float32)

    def norm(self, name: str, n: int, center: float = 1.0) -> None:
        self.tensors[name] = (center + 0.01 * self.rng.standard_normal(n)).astype(np.float32)

    def linear(self, prefix: str, out: int, inp: int, bias: bool = True) -> None:
        self.mat(f"{prefix}.weight", out, inp)
        if bias:
            self.mat(f"{prefix}.bias", out)

    def layernorm(self, prefix: str, n: int) -> None:
        self.norm(f"{prefix}.weight", n)
        self.mat(f"{prefix}.bias", n, scale=0.01)


def save_weights(path: Path, tensors: dict[str, np.ndarray], *, bf16: bool, shards: int) -> None:
    """model.safetensors, or `shards` files with a model.safetensors.index.json."""
    if shards <= 1:
        save_file(tensors, path / "model.safetensors", bf16=bf16, metadata={"format": "pt"})
        return
    names = list(tensors)
    weight_map: dict[str, str] = {}
    for i in range(shards):
        part = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        chunk = {n: tensors[n] for n in names[i::shards]}
        save_file(chunk, path / part, bf16=bf16, metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(chunk, part))
    total = sum(a.size * (2 if bf16 else 4) for a in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (path / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False), encoding="utf-8")


def _write_tokenizer(path: Path, kind: str) -> None:
    tokenizer, config, _ = tokenizer_files(kind)
    _write_json(path / "tokenizer.json", tokenizer)
    _write_json(path / "tokenizer_config.json", config)


# ------------------------------------------------------------------------ LFM2
def lfm2_text_config(kind: str = "lfm2") -> dict[str, Any]:
    return {
        "model_type": "lfm2",
        "architectures": ["Lfm2ForCausalLM"],
        "hidden_size": HIDDEN,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": vocab_size(kind),
        "block_ff_dim": 192,
        "block_auto_adjust_ff_dim": True,
        "block_ffn_dim_multiplier": 1.0,
        "block_multiple_of": 32,
        "conv_L_cache": 3,
        "norm_eps": 1e-5,
        "max_position_embeddings": 4096,
        "rope_theta": 1000000.0,
        "layer_types": ["conv", "full_attention"],
        "tie_embedding": True,
        "bos_token_id": 1,
        "eos_token_id": 7,
        "pad_token_id": 0,
    }


def _lfm2_trunk(w: _Weights, prefix: str, cfg: dict[str, Any]) -> None:
    h, ff, hd = cfg["hidden_size"], 128, cfg["hidden_size"] // cfg["num_attention_heads"]
    w.mat(f"{prefix}embed_tokens.weight", cfg["vocab_size"], h, scale=0.5)
    for i, kind in enumerate(cfg["layer_types"]):
        p = f"{prefix}layers.{i}."
        w.norm(p + "operator_norm.weight", h)
        if kind == "conv":
            w.mat(p + "conv.in_proj.weight", 3 * h, h)
            w.mat(p + "conv.conv.weight", h, 1, cfg["conv_L_cache"], scale=0.3)
            w.mat(p + "conv.out_proj.weight", h, h)
        else:
            w.mat(p + "self_attn.q_proj.weight", cfg["num_attention_heads"] * hd, h)
            w.mat(p + "self_attn.k_proj.weight", cfg["num_key_value_heads"] * hd, h)
            w.mat(p + "self_attn.v_proj.weight", cfg["num_key_value_heads"] * hd, h)
            w.mat(p + "self_attn.out_proj.weight", h, cfg["num_attention_heads"] * hd)
            w.norm(p + "self_attn.q_layernorm.weight", hd)
            w.norm(p + "self_attn.k_layernorm.weight", hd)
        w.norm(p + "ffn_norm.weight", h)
        w.mat(p + "feed_forward.w1.weight", ff, h)
        w.mat(p + "feed_forward.w3.weight", ff, h)
        w.mat(p + "feed_forward.w2.weight", h, ff)
    w.norm(f"{prefix}embedding_norm.weight", h)


SIGLIP: dict[str, Any] = {
    "model_type": "siglip2_vision_model",
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "patch_size": 16,
    "num_patches": 256,
    "num_channels": 3,
    "layer_norm_eps": 1e-6,
    "vision_use_head": False,
}


def _siglip_tower(w: _Weights, text_hidden: int, downsample: int = 2) -> None:
    v, p = SIGLIP["hidden_size"], "model.vision_tower.vision_model."
    w.linear(p + "embeddings.patch_embedding", v, 3 * 16 * 16)
    w.mat(p + "embeddings.position_embedding.weight", SIGLIP["num_patches"], v)
    for i in range(SIGLIP["num_hidden_layers"]):
        q = f"{p}encoder.layers.{i}."
        w.layernorm(q + "layer_norm1", v)
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
            w.linear(q + "self_attn." + proj, v, v)
        w.layernorm(q + "layer_norm2", v)
        w.linear(q + "mlp.fc1", SIGLIP["intermediate_size"], v)
        w.linear(q + "mlp.fc2", v, SIGLIP["intermediate_size"])
    w.layernorm(p + "post_layernorm", v)
    merged = v * downsample * downsample
    w.layernorm("model.multi_modal_projector.layer_norm", merged)
    w.linear("model.multi_modal_projector.linear_1", 64, merged)
    w.linear("model.multi_modal_projector.linear_2", text_hidden, 64)


def build_lfm2_d1(path: Path, *, bf16: bool = False, shards: int = 1, seed: int = 1) -> Path:
    """LiquidAI d1: an LFM2-VL checkpoint whose auto_map names D1Model."""
    path.mkdir(parents=True, exist_ok=True)
    text = lfm2_text_config()
    _write_json(
        path / "config.json",
        {
            "architectures": ["Lfm2VlForConditionalGeneration"],
            "model_type": "lfm2_vl",
            "auto_map": {
                "AutoConfig": "configuration_d1.D1Config",
                "AutoModel": "modeling_d1.D1Model",
            },
            "downsample_factor": 2,
            "projector_hidden_size": 64,
            "vision_feature_layer": -1,
            "text_config": text,
            "vision_config": SIGLIP,
        },
    )
    _write_json(
        path / "preprocessor_config.json",
        {
            "image_processor_type": "Lfm2VlImageProcessorFast",
            "image_mean": [0.5, 0.5, 0.5],
            "image_std": [0.5, 0.5, 0.5],
            "resample": 2,
            "do_image_splitting": True,
            "min_image_tokens": 64,
            "max_image_tokens": 256,
            "encoder_patch_size": 16,
            "tile_size": 512,
            "downsample_factor": 2,
        },
    )
    _write_json(path / "calibration.json", {"temperatures": {"choice": 1.25, "noul": 0.8}})
    _write_tokenizer(path, "lfm2")
    w = _Weights(seed)
    _lfm2_trunk(w, "model.language_model.", text)
    _siglip_tower(w, text["hidden_size"])
    save_weights(path, w.tensors, bf16=bf16, shards=shards)
    return path


OMNI_TEMPERATURES = {
    "choice": 1.0,
    "choice:2": 1.7465,
    "choice:3-5": 1.3999,
    "choice:6-10": 1.1751,
    "choice:11+": 1.3725,
    "noul:2": 1.6663,
    "score:3-5": 1.7301,
}


def build_lfm2_d1_omni(
    path: Path, *, bf16: bool = False, shards: int = 1, seed: int = 2, head_layers: int = 1
) -> Path:
    """d1-omni: a bidirectional LFM2 trunk (`encoder.*`) plus head blocks and an option scorer
    (`head.*`), with vision/audio weights the text conversion leaves to the mmproj."""
    path.mkdir(parents=True, exist_ok=True)
    text = lfm2_text_config()
    _write_json(
        path / "config.json",
        {
            "architectures": ["D1OmniModel"],
            "model_type": "d1_omni",
            "head_layers": head_layers,
            "max_length": 16384,
            "image_text_length": 896,
            "audio_text_length": 15360,
            "text_config": text,
            "temperatures": OMNI_TEMPERATURES,
        },
    )
    _write_tokenizer(path, "lfm2")
    w = _Weights(seed)
    _lfm2_trunk(w, "encoder.", text)
    h = text["hidden_size"]
    w.mat("head.type_emb.weight", 3, h)
    for i in range(head_layers):
        p = f"head.head.layers.{i}."
        w.layernorm(p + "norm1", h)
        w.linear(p + "attn.qkv", 3 * h, h)
        w.linear(p + "attn.out", h, h)
        w.layernorm(p + "norm2", h)
        w.linear(p + "mlp.fc1", 4 * h, h)
        w.linear(p + "mlp.fc2", h, 4 * h)
    w.layernorm("head.scorer.norm", h)
    w.linear("head.scorer.dense", h, h)
    w.linear("head.scorer.out", 1, h)
    w.mat("vision.patch_embed.weight", 32, 3 * 16 * 16)  # left to the mmproj
    w.mat("audio.subsampling.weight", 32, 80)
    save_weights(path, w.tensors, bf16=bf16, shards=shards)
    return path


# ------------------------------------------------------------------------ Qwen
def qwen35_text_config() -> dict[str, Any]:
    return {
        "model_type": "qwen3_5_text",
        "hidden_size": HIDDEN,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 32,
        "intermediate_size": 128,
        "vocab_size": vocab_size("qwen"),
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6,
        "layer_types": ["linear_attention", "full_attention"],
        "full_attention_interval": 2,
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 16,
        "linear_value_head_dim": 16,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "attn_output_gate": True,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10000000.0,
            "partial_rotary_factor": 0.25,
            "mrope_section": [2, 1, 1],
            "mrope_interleaved": True,
        },
        "tie_word_embeddings": False,
        "mtp_num_hidden_layers": 1,
        "eos_token_id": None,
    }


QWEN_VISION: dict[str, Any] = {
    "depth": 1,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_heads": 2,
    "patch_size": 16,
    "temporal_patch_size": 2,
    "spatial_merge_size": 2,
    "out_hidden_size": HIDDEN,
    "num_position_embeddings": 64,
    "in_channels": 3,
    "deepstack_visual_indexes": [],
}
QWEN_PREPROCESSOR: dict[str, Any] = {
    "image_processor_type": "Qwen2VLImageProcessorFast",
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "patch_size": 16,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "min_pixels": 65536,
    "max_pixels": 16777216,
}


def _qwen35_trunk(
    w: _Weights, cfg: dict[str, Any], *, prefix: str = "model.language_model.", lm_head: bool = True
) -> None:
    h, ff, hd = cfg["hidden_size"], cfg["intermediate_size"], cfg["head_dim"]
    nk, nv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    dk, dv = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"]
    conv_dim = 2 * nk * dk + nv * dv
    w.mat(f"{prefix}embed_tokens.weight", cfg["vocab_size"], h, scale=0.5)
    for i, kind in enumerate(cfg["layer_types"]):
        p = f"{prefix}layers.{i}."
        w.norm(p + "input_layernorm.weight", h, center=0.0)
        if kind == "linear_attention":
            a = p + "linear_attn."
            w.mat(a + "in_proj_qkv.weight", conv_dim, h, scale=0.3)  # large enough that a
            w.mat(a + "in_proj_z.weight", nv * dv, h, scale=0.3)  # wrong head order shows
            w.mat(a + "in_proj_b.weight", nv, h, scale=0.3)
            w.mat(a + "in_proj_a.weight", nv, h, scale=0.3)
            w.mat(a + "conv1d.weight", conv_dim, 1, cfg["linear_conv_kernel_dim"], scale=0.3)
            w.tensors[a + "dt_bias"] = np.ones(nv, dtype=np.float32)
            w.tensors[a + "A_log"] = np.log(w.rng.uniform(1, 4, nv)).astype(np.float32)
            w.norm(a + "norm.weight", dv)
            w.mat(a + "out_proj.weight", h, nv * dv, scale=0.3)
        else:
            s = p + "self_attn."
            w.mat(s + "q_proj.weight", 2 * cfg["num_attention_heads"] * hd, h)
            w.mat(s + "k_proj.weight", cfg["num_key_value_heads"] * hd, h)
            w.mat(s + "v_proj.weight", cfg["num_key_value_heads"] * hd, h)
            w.mat(s + "o_proj.weight", h, cfg["num_attention_heads"] * hd)
            w.norm(s + "q_norm.weight", hd, center=0.0)
            w.norm(s + "k_norm.weight", hd, center=0.0)
        w.norm(p + "post_attention_layernorm.weight", h, center=0.0)
        w.mat(p + "mlp.gate_proj.weight", ff, h)
        w.mat(p + "mlp.up_proj.weight", ff, h)
        w.mat(p + "mlp.down_proj.weight", h, ff)
    w.norm(f"{prefix}norm.weight", h, center=0.0)
    if lm_head:
        w.mat("lm_head.weight", cfg["vocab_size"], h)
    w.mat("mtp.fc.weight", h, 2 * h)  # the MTP block, which conversion drops


def _qwen_vision(w: _Weights) -> None:
    v, ffv, p = QWEN_VISION["hidden_size"], QWEN_VISION["intermediate_size"], "model.visual."
    w.mat(p + "patch_embed.proj.weight", v, 3, 2, 16, 16)
    w.mat(p + "patch_embed.proj.bias", v)
    w.mat(p + "pos_embed.weight", QWEN_VISION["num_position_embeddings"], v)
    for i in range(QWEN_VISION["depth"]):
        b = f"{p}blocks.{i}."
        w.layernorm(b + "norm1", v)
        w.linear(b + "attn.qkv", 3 * v, v)
        w.linear(b + "attn.proj", v, v)
        w.layernorm(b + "norm2", v)
        w.linear(b + "mlp.linear_fc1", ffv, v)
        w.linear(b + "mlp.linear_fc2", v, ffv)
    w.layernorm(p + "merger.norm", v)
    w.linear(p + "merger.linear_fc1", 4 * v, 4 * v)
    w.linear(p + "merger.linear_fc2", HIDDEN, 4 * v)


def _qwen35_checkpoint(
    path: Path,
    config: dict[str, Any],
    *,
    vision: bool,
    lm_head: bool,
    extra: Callable[[_Weights], None] | None,
    bf16: bool,
    shards: int,
    seed: int,
) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    _write_json(path / "config.json", config)
    _write_tokenizer(path, "qwen")
    if vision:
        _write_json(path / "preprocessor_config.json", QWEN_PREPROCESSOR)
    w = _Weights(seed)
    _qwen35_trunk(w, config.get("text_config", config), lm_head=lm_head)
    if vision:
        _qwen_vision(w)
    if extra is not None:
        extra(w)
    save_weights(path, w.tensors, bf16=bf16, shards=shards)
    return path


def build_qwen35_base(
    path: Path,
    *,
    bf16: bool = False,
    shards: int = 1,
    seed: int = 3,
    vision: bool = False,
    layer_types: tuple[str, ...] | None = None,
) -> Path:
    """A Qwen3.5 checkpoint (the base model lev and kev adapters are merged into);
    `layer_types` replaces the periodic pattern (full attention every 2nd layer)."""
    text_config = qwen35_text_config()
    if layer_types is not None:
        text_config |= {"layer_types": list(layer_types), "num_hidden_layers": len(layer_types)}
    config = {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "_name_or_path": "Qwen/Qwen3.5-4B",
        "text_config": text_config,
        "tie_word_embeddings": False,
    }
    if vision:
        config["vision_config"] = QWEN_VISION
    return _qwen35_checkpoint(
        path, config, vision=vision, lm_head=True, extra=None, bf16=bf16, shards=shards, seed=seed
    )


def build_openjev(path: Path, *, bf16: bool = False, shards: int = 1, seed: int = 4) -> Path:
    """OpenJev: a Qwen3.5-VL causal LM marked as a decision model by its calibration file."""
    build_qwen35_base(path, bf16=bf16, shards=shards, seed=seed, vision=True)
    _write_json(
        path / "calibration.json",
        {
            "decision_type": "openjev",
            "temperatures": {"choice": 1.2, "score": 0.9, "noul": 1.1, "choice:11+": 1.3},
        },
    )
    return path


OPENJEV_SHIM = "# OpenJev's serving helper: prompt layout and temperatures (text lane)\n"


def build_openjev_upstream(
    path: Path,
    *,
    bf16: bool = False,
    shards: int = 1,
    seed: int = 4,
    layer_types: tuple[str, ...] | None = None,
) -> Path:
    """OpenJev as upstream publishes it: a Qwen3.5-VL checkpoint with `helper/shim.py`, no
    calibration.json, nothing named openjev (a cache snapshot is named by a hash)."""
    build_qwen35_base(
        path, bf16=bf16, shards=shards, seed=seed, vision=True, layer_types=layer_types
    )
    (path / "helper").mkdir(exist_ok=True)
    (path / "helper" / "shim.py").write_text(OPENJEV_SHIM, encoding="utf-8")
    return path


H2O_SYSTEM = "You are a careful reviewer. Read the record and answer with one option label."
H2O_TEMPERATURE = 1.5
H2O_NOUL_FLOOR = 0.9


def build_h2o_lightning(path: Path, *, bf16: bool = False, shards: int = 1, seed: int = 9) -> Path:
    """H2O-Lightning: a Qwen3.5 causal LM with its serving contract in serve_config.json."""
    build_qwen35_base(path, bf16=bf16, shards=shards, seed=seed)
    _write_json(
        path / "serve_config.json",
        {
            "model": "h2oai/H2O-Lightning-4B",
            "temperature": H2O_TEMPERATURE,
            "noul_floor": H2O_NOUL_FLOOR,
            "labels": [chr(c) for c in range(ord("A"), ord("Z") + 1)],
            "prompt": {
                "chat_template": True,
                "enable_thinking": False,
                "system": H2O_SYSTEM,
                "layout": "plain",
                "state_compact": True,
                "prefill": "Answer:",
                "default_instructions": "Answer the question below.",
            },
        },
    )
    return path


def build_openjev_qwen3(path: Path, *, bf16: bool = False, shards: int = 1, seed: int = 5) -> Path:
    """OpenJev on a Qwen3 trunk (tied embeddings, no linear attention)."""
    path.mkdir(parents=True, exist_ok=True)
    cfg: dict[str, Any] = {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "hidden_size": HIDDEN,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "intermediate_size": 128,
        "vocab_size": vocab_size("qwen"),
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "tie_word_embeddings": True,
        "decision_type": "openjev",
    }
    _write_json(path / "config.json", cfg)
    _write_tokenizer(path, "qwen")
    w = _Weights(seed)
    w.mat("model.embed_tokens.weight", cfg["vocab_size"], HIDDEN, scale=0.5)
    for i in range(2):
        p = f"model.layers.{i}."
        w.norm(p + "input_layernorm.weight", HIDDEN)
        w.mat(p + "self_attn.q_proj.weight", 4 * 16, HIDDEN)
        w.mat(p + "self_attn.k_proj.weight", 2 * 16, HIDDEN)
        w.mat(p + "self_attn.v_proj.weight", 2 * 16, HIDDEN)
        w.mat(p + "self_attn.o_proj.weight", HIDDEN, 4 * 16)
        w.norm(p + "self_attn.q_norm.weight", 16)
        w.norm(p + "self_attn.k_norm.weight", 16)
        w.norm(p + "post_attention_layernorm.weight", HIDDEN)
        w.mat(p + "mlp.gate_proj.weight", 128, HIDDEN)
        w.mat(p + "mlp.up_proj.weight", 128, HIDDEN)
        w.mat(p + "mlp.down_proj.weight", HIDDEN, 128)
    w.norm("model.norm.weight", HIDDEN)
    save_weights(path, w.tensors, bf16=bf16, shards=shards)
    return path


def build_minicpm_ocr_jev(
    path: Path, *, bf16: bool = False, shards: int = 1, seed: int = 6
) -> Path:
    """MiniCPM-OCR-Jev: Qwen3.5-VL trunk, `score.weight` value head, no LM head."""
    config = {
        "architectures": ["MiniCPMOCRForSequenceClassification"],
        "model_type": "minicpm_ocr_jev",
        "text_config": qwen35_text_config(),
        "vision_config": QWEN_VISION,
        "id2label": {"0": "mismatch", "1": "match"},
        "label2id": {"mismatch": 0, "match": 1},
        "num_labels": 2,
    }

    def score(w: _Weights) -> None:
        w.mat("score.weight", 2, HIDDEN)

    return _qwen35_checkpoint(
        path, config, vision=True, lm_head=False, extra=score, bf16=bf16, shards=shards, seed=seed
    )


# ------------------------------------------------------------------ adapters
LORA_TARGETS = (
    "layers.0.mlp.up_proj",
    "layers.0.linear_attn.in_proj_qkv",
    "layers.1.self_attn.q_proj",
)


def _lora_adapter(path: Path, base: Path, *, rank: int = 4, alpha: int = 8, seed: int) -> None:
    """adapter_config.json + adapter_model.safetensors over `base` (PEFT's naming)."""
    path.mkdir(parents=True, exist_ok=True)
    _write_json(
        path / "adapter_config.json",
        {
            "peft_type": "LORA",
            "task_type": "CAUSAL_LM",
            "r": rank,
            "lora_alpha": alpha,
            "lora_dropout": 0.0,
            "bias": "none",
            "use_dora": False,
            "use_rslora": False,
            "base_model_name_or_path": "Qwen/Qwen3.5-4B",
            "revision": None,
            "target_modules": ["up_proj", "in_proj_qkv", "q_proj"],
            "modules_to_save": None,
        },
    )
    base_file = SafetensorsFile(base / "model.safetensors")
    rng = np.random.default_rng(seed)
    tensors: dict[str, np.ndarray] = {}
    for target in LORA_TARGETS:
        out, inp = base_file.entries[f"model.language_model.{target}.weight"].shape
        stem = f"base_model.model.model.language_model.{target}"
        tensors[f"{stem}.lora_A.weight"] = (rng.standard_normal((rank, inp)) * 0.1).astype(
            np.float32
        )
        tensors[f"{stem}.lora_B.weight"] = (rng.standard_normal((out, rank)) * 0.1).astype(
            np.float32
        )
    base_file.close()
    save_file(tensors, path / "adapter_model.safetensors")


LEV_TEMPERATURES = {
    "choice:A:small": 1.1,
    "choice:A:mid": 1.2,
    "choice:A:large": 1.3,
    "choice:B:large": 9.0,
    "score:A": 0.8,
    "noul:A": 1.05,
}


def build_lev(path: Path, *, base: Path, seed: int = 7, **_: Any) -> Path:
    """Lev: a LoRA adapter over Qwen3.5, detected by lev_release.json."""
    _lora_adapter(path, base, seed=seed)
    _write_json(path / "lev_release.json", {"name": "lev", "version": "0.1.0"})
    _write_json(path / "calibration.json", {"temperatures": LEV_TEMPERATURES})
    return path


KEV_HEAD_DIM = 8
KEV_TEMPERATURE = 0.7


def build_kev(path: Path, *, base: Path, seed: int = 8, **_: Any) -> Path:
    """Kev: a LoRA adapter plus the pointer head in head.pt (q/k projections)."""
    _lora_adapter(path, base, seed=seed)
    rng = np.random.default_rng(seed)
    head = {
        f"{p}.{k}": (rng.standard_normal(shape) * 0.1).astype(np.float32)
        for p in ("q", "k")
        for k, shape in (("weight", (KEV_HEAD_DIM, HIDDEN)), ("bias", (KEV_HEAD_DIM,)))
    }
    write_torch_file(
        path / "head.pt", {"head": head, "head_dim": KEV_HEAD_DIM, "temperature": KEV_TEMPERATURE}
    )
    _write_json(
        path / "training_config.json",
        {"args": {"head_dim": KEV_HEAD_DIM, "lora_r": 4, "base": "Qwen/Qwen3.5-4B"}},
    )
    return path


# ------------------------------------------------------------- torch.save format
def write_torch_file(path: Path, obj: dict[str, Any]) -> None:
    """A `torch.save` zip of nested dicts of float32 arrays, ints and floats, written as torch
    does (pickle protocol 2, tensors rebuilt by torch._utils._rebuild_tensor_v2)."""
    storages: list[np.ndarray] = []
    out = io.BytesIO()
    out.write(b"\x80\x02")
    _pickle_value(out, obj, storages)
    out.write(b".")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", out.getvalue())
        z.writestr("archive/byteorder", "little")
        for key, arr in enumerate(storages):
            z.writestr(f"archive/data/{key}", np.ascontiguousarray(arr, "<f4").tobytes())
        z.writestr("archive/version", "3\n")


def _pickle_str(out: io.BytesIO, s: str) -> None:
    data = s.encode()
    out.write(b"X" + struct.pack("<I", len(data)) + data)


def _pickle_tuple(out: io.BytesIO, items: tuple[int, ...]) -> None:
    out.write(b"(")
    for i in items:
        out.write(b"J" + struct.pack("<i", i))
    out.write(b"t")


def _pickle_value(out: io.BytesIO, value: Any, storages: list[np.ndarray]) -> None:
    if isinstance(value, dict):
        out.write(b"}(")
        for k, v in value.items():
            _pickle_str(out, k)
            _pickle_value(out, v, storages)
        out.write(b"u")
    elif isinstance(value, bool):
        out.write(b"\x88" if value else b"\x89")
    elif isinstance(value, int):
        out.write(b"J" + struct.pack("<i", value))
    elif isinstance(value, float):
        out.write(b"G" + struct.pack(">d", value))
    elif isinstance(value, np.ndarray):
        key = len(storages)
        storages.append(value)
        strides = tuple(int(np.prod(value.shape[i + 1 :])) for i in range(value.ndim))
        out.write(b"ctorch._utils\n_rebuild_tensor_v2\n(")
        out.write(b"(")  # persistent id: ('storage', FloatStorage, key, 'cpu', numel)
        _pickle_str(out, "storage")
        out.write(b"ctorch\nFloatStorage\n")
        _pickle_str(out, str(key))
        _pickle_str(out, "cpu")
        out.write(b"J" + struct.pack("<i", value.size))
        out.write(b"tQ")
        out.write(b"J" + struct.pack("<i", 0))
        _pickle_tuple(out, value.shape)
        _pickle_tuple(out, strides)
        out.write(b"\x89")  # requires_grad
        out.write(b"ccollections\nOrderedDict\n)R")  # backward hooks
        out.write(b"tR")
    else:
        raise TypeError(f"cannot write {type(value).__name__} to a torch file")


# ------------------------------------------------------------------- chat models
def _dense_layers(
    w: _Weights,
    cfg: dict[str, Any],
    *,
    qkv_bias: bool = False,
    qk_norm: bool = False,
    sandwich: bool = False,
    norm_center: float = 1.0,
) -> None:
    """A Llama-style decoder stack under `model.` (what Llama, Qwen2/3 and Gemma 3 share);
    Gemma's norms store w for a (1 + w) scale, so they sit near 0 (`norm_center`)."""
    h, ff = cfg["hidden_size"], cfg["intermediate_size"]
    hd = cfg.get("head_dim", h // cfg["num_attention_heads"])
    nq, nkv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    w.mat("model.embed_tokens.weight", cfg["vocab_size"], h, scale=0.5)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w.norm(p + "input_layernorm.weight", h, norm_center)
        w.linear(p + "self_attn.q_proj", nq, h, bias=qkv_bias)
        w.linear(p + "self_attn.k_proj", nkv, h, bias=qkv_bias)
        w.linear(p + "self_attn.v_proj", nkv, h, bias=qkv_bias)
        w.mat(p + "self_attn.o_proj.weight", h, nq)
        if qk_norm:
            w.norm(p + "self_attn.q_norm.weight", hd, norm_center)
            w.norm(p + "self_attn.k_norm.weight", hd, norm_center)
        w.norm(p + "post_attention_layernorm.weight", h, norm_center)
        if sandwich:
            w.norm(p + "pre_feedforward_layernorm.weight", h, norm_center)
            w.norm(p + "post_feedforward_layernorm.weight", h, norm_center)
        w.mat(p + "mlp.gate_proj.weight", ff, h)
        w.mat(p + "mlp.up_proj.weight", ff, h)
        w.mat(p + "mlp.down_proj.weight", h, ff)
    w.norm("model.norm.weight", h, norm_center)
    if not cfg.get("tie_word_embeddings", False):
        w.mat("lm_head.weight", cfg["vocab_size"], h)


def _chat_checkpoint(
    path: Path,
    cfg: dict[str, Any],
    tokenizer: str,
    layers: Callable[[_Weights], None],
    *,
    bf16: bool,
    shards: int,
    seed: int,
) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    _write_json(path / "config.json", cfg)
    _write_tokenizer(path, tokenizer)
    w = _Weights(seed)
    layers(w)
    save_weights(path, w.tensors, bf16=bf16, shards=shards)
    return path


def build_llama(path: Path, *, bf16: bool = False, shards: int = 1, seed: int = 11) -> Path:
    """A Llama 3 style chat model (LlamaForCausalLM, byte-level BPE, grouped-query attention)."""
    _, _, ids = tokenizer_files("llama")
    cfg: dict[str, Any] = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 128,
        "vocab_size": vocab_size("llama"),
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "bos_token_id": ids["<|begin_of_text|>"],
        "eos_token_id": ids["<|eot_id|>"],
    }
    return _chat_checkpoint(
        path, cfg, "llama", lambda w: _dense_layers(w, cfg), bf16=bf16, shards=shards, seed=seed
    )


def build_qwen2(path: Path, *, bf16: bool = False, shards: int = 1, seed: int = 12) -> Path:
    """A Qwen2 / Qwen2.5 chat model (biases on q, k and v; tied embeddings)."""
    cfg: dict[str, Any] = {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "hidden_size": HIDDEN,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 128,
        "vocab_size": vocab_size("qwen"),
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": True,
    }

    def layers(w: _Weights) -> None:
        _dense_layers(w, cfg, qkv_bias=True)

    return _chat_checkpoint(path, cfg, "qwen", layers, bf16=bf16, shards=shards, seed=seed)


def build_qwen3(path: Path, *, bf16: bool = False, shards: int = 1, seed: int = 13) -> Path:
    """A Qwen3 chat model (q/k norms, explicit head_dim, separate LM head)."""
    cfg: dict[str, Any] = {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "hidden_size": HIDDEN,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "intermediate_size": 128,
        "vocab_size": vocab_size("qwen"),
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
    }

    def layers(w: _Weights) -> None:
        _dense_layers(w, cfg, qk_norm=True)

    return _chat_checkpoint(path, cfg, "qwen", layers, bf16=bf16, shards=shards, seed=seed)


def build_lfm2(path: Path, *, bf16: bool = False, shards: int = 1, seed: int = 14) -> Path:
    """An LFM2 chat model (Lfm2ForCausalLM: short convolutions and attention, tied head)."""
    cfg = lfm2_text_config()

    def layers(w: _Weights) -> None:
        _lfm2_trunk(w, "model.", cfg)

    return _chat_checkpoint(path, cfg, "lfm2", layers, bf16=bf16, shards=shards, seed=seed)


def build_gemma3(path: Path, *, bf16: bool = False, shards: int = 1, seed: int = 15) -> Path:
    """A Gemma 3 text model (Gemma3ForCausalLM): (1 + w) norms around attention and MLP,
    q/k norms, sliding-window layers with full attention every second layer, tied head."""
    _, _, ids = tokenizer_files("gemma")
    cfg: dict[str, Any] = {
        "architectures": ["Gemma3ForCausalLM"],
        "model_type": "gemma3_text",
        "hidden_size": HIDDEN,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "intermediate_size": 128,
        "vocab_size": vocab_size("gemma"),
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "rope_local_base_freq": 10000.0,
        "rope_scaling": None,
        "sliding_window": 32,
        "sliding_window_pattern": 2,
        "layer_types": ["sliding_attention", "full_attention"],
        "query_pre_attn_scalar": 16,
        "final_logit_softcapping": None,
        "attn_logit_softcapping": None,
        "hidden_activation": "gelu_pytorch_tanh",
        "tie_word_embeddings": True,
        "bos_token_id": ids["<bos>"],
        "eos_token_id": ids["<eos>"],
        "pad_token_id": ids["<pad>"],
    }

    def layers(w: _Weights) -> None:
        _dense_layers(w, cfg, qk_norm=True, sandwich=True, norm_center=0.0)

    return _chat_checkpoint(path, cfg, "gemma", layers, bf16=bf16, shards=shards, seed=seed)


CHAT_EXAMPLES = ("llama", "qwen2", "qwen3", "qwen35", "lfm2", "gemma3")
SPEECH_EXAMPLES = ("pocket-tts",)
DECISION_EXAMPLES = (
    "lfm2-d1",
    "lfm2-d1-omni",
    "openbmb-minicpm-ocr-jev",
    "openjev",
    "h2o-lightning",
    "lev",
    "kev",
)


def write_examples(root: Path | str) -> dict[str, Path]:
    """One tiny checkpoint of each family under `root` (`root/llama`, `root/openjev`...);
    lev and kev are adapters over `root/qwen35` (pass it with --base)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    out: dict[str, Path] = {}
    for name in CHAT_EXAMPLES + DECISION_EXAMPLES + SPEECH_EXAMPLES:
        options: dict[str, Any] = {"base": out["qwen35"]} if name in ("lev", "kev") else {}
        out[name] = build(name, root / name, **options)
    return out


# ------------------------------------------------------------------------- API
BUILDERS: dict[str, Callable[..., Path]] = {
    "lfm2-d1": build_lfm2_d1,
    "lfm2-d1-omni": build_lfm2_d1_omni,
    "openbmb-minicpm-ocr-jev": build_minicpm_ocr_jev,
    "openjev": build_openjev,
    "openjev-qwen3": build_openjev_qwen3,
    "openjev-upstream": build_openjev_upstream,
    "h2o-lightning": build_h2o_lightning,
    "qwen35-base": build_qwen35_base,
    "lev": build_lev,
    "kev": build_kev,
    "llama": build_llama,
    "qwen2": build_qwen2,
    "qwen3": build_qwen3,
    "qwen35": build_qwen35_base,
    "lfm2": build_lfm2,
    "gemma3": build_gemma3,
    "pocket-tts": build_pockettts,
}


def build(name: str, path: Path, **options: Any) -> Path:
    """Write the synthetic checkpoint `name` (see BUILDERS) into `path`."""
    return BUILDERS[name](Path(path), **options)
