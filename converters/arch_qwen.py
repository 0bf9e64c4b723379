"""Qwen trunks in llama.cpp's layouts: `qwen35` (Qwen3.5: gated delta-net linear attention
interleaved with gated full attention) and `qwen3`.

For qwen35 this follows llama.cpp's converter: `A_log` stored as -exp(A_log), `dt_bias` as
`ssm_dt.bias`, convolution kernels squeezed, RMSNorm weights stored as 1 + w (the model code
scales by 1 + w) except the delta-net's own norm, and, when there are more value heads than key
heads, the value heads reordered from grouped-by-key-head to tiled order (ggml broadcasts by
tiling). The multi-token-prediction block is not converted (`no_mtp`): decision models do not
generate text.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gguf
import numpy as np

from llamactl.core.errors import CheckpointError

from .checkpoint import Checkpoint, merged_text_config
from .lazy import Lazy, concat
from .plan import OutTensor, OutType
from .textmodel import gguf_name, rope_parameters, write_base_hparams

QWEN35_ARCHITECTURES = ("Qwen3_5ForConditionalGeneration", "Qwen3_5ForCausalLM")
QWEN3_ARCHITECTURES = ("Qwen3ForCausalLM",)
QWEN35_DEFAULT_MROPE = [11, 11, 10, 0]
RECURRENT_LAYERS = "{arch}.attention.recurrent_layers"  # not in the pinned gguf package's Keys


@dataclass(frozen=True)
class QwenTrunk:
    arch: gguf.MODEL_ARCH
    pre: str
    hp: dict[str, Any]
    n_layers: int

    @property
    def arch_name(self) -> str:
        return gguf.MODEL_ARCH_NAMES[self.arch]


def read_trunk(ckpt: Checkpoint, config: dict[str, Any] | None = None) -> QwenTrunk:
    """A Qwen3.5 or Qwen3 trunk from config.json, by its declared architecture."""
    config = ckpt.config if config is None else config
    archs = config.get("architectures") or []
    where = "text_config." if isinstance(config.get("text_config"), dict) else ""
    hp = merged_text_config(config)
    for key in (
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "intermediate_size",
        "vocab_size",
    ):
        ckpt.field(hp, key, int, where=where)
    if any(a in QWEN3_ARCHITECTURES for a in archs):
        return QwenTrunk(gguf.MODEL_ARCH.QWEN3, "qwen2", hp, hp["num_hidden_layers"])
    for key in (
        "head_dim",
        "linear_conv_kernel_dim",
        "linear_key_head_dim",
        "linear_value_head_dim",
        "linear_num_key_heads",
        "linear_num_value_heads",
    ):
        ckpt.field(hp, key, int, where=where)
    layer_types = hp.get("layer_types")
    if layer_types is not None and (
        not isinstance(layer_types, list) or len(layer_types) != hp["num_hidden_layers"]
    ):
        raise CheckpointError(
            ckpt.dir / "config.json",
            f"{where}layer_types",
            f"expected a list of {hp['num_hidden_layers']} layer types (num_hidden_layers), "
            f"got {layer_types!r}",
        )
    return QwenTrunk(gguf.MODEL_ARCH.QWEN35, "qwen35", hp, hp["num_hidden_layers"])


def write_hparams(w: gguf.GGUFWriter, t: QwenTrunk, out: OutType) -> None:
    hp = t.hp
    write_base_hparams(w, hp, out, block_count=t.n_layers)
    if t.arch != gguf.MODEL_ARCH.QWEN35:
        return
    w.add_ssm_conv_kernel(hp["linear_conv_kernel_dim"])
    w.add_ssm_state_size(hp["linear_key_head_dim"])
    w.add_ssm_group_count(hp["linear_num_key_heads"])
    w.add_ssm_time_step_rank(hp["linear_num_value_heads"])
    w.add_ssm_inner_size(hp["linear_value_head_dim"] * hp["linear_num_value_heads"])
    if hp.get("layer_types") is not None:
        # which layers are linear attention, layer by layer: a pattern need not be periodic
        # (the loader prefers this to full_attention_interval, which is written as well)
        recurrent = [kind == "linear_attention" for kind in hp["layer_types"]]
        w.add_array(RECURRENT_LAYERS.format(arch=t.arch_name), recurrent)
    w.add_full_attention_interval(hp.get("full_attention_interval", 4))
    rope = rope_parameters(hp)
    partial = hp.get("partial_rotary_factor", rope.get("partial_rotary_factor", 0.25))
    w.add_rope_dimension_count(int(hp["head_dim"] * partial))
    if "mrope_section" not in rope:  # llama.cpp's qwen35 loader requires the sections
        w.add_rope_dimension_sections(QWEN35_DEFAULT_MROPE)


def default_rename(name: str) -> str | None:
    """Text weights only: the vision tower, the MTP block and classifier heads are dropped."""
    if name.startswith(("mtp.", "model.visual.", "visual.")):
        return None
    return name.replace("model.language_model.", "model.")


def trunk_tensors(
    ckpt: Checkpoint,
    t: QwenTrunk,
    *,
    rename: Callable[[str], str | None] = default_rename,
    source: Callable[[str], Lazy] | None = None,
) -> list[OutTensor]:
    """Every trunk weight with its GGUF name; `source` lets a LoRA merge sit in between."""
    tmap = gguf.get_tensor_name_map(t.arch, t.n_layers)
    load = source or ckpt.lazy
    out: list[OutTensor] = []
    for hf_name in ckpt.tensor_names():
        name = rename(hf_name)
        if name is None:
            continue
        data = load(hf_name)
        if t.arch == gguf.MODEL_ARCH.QWEN35:
            name, data = _qwen35_transform(name, data, t.hp)
        out.append(OutTensor(gguf_name(tmap, name, ckpt, hf_name=hf_name, arch=t.arch_name), data))
    return out


def _qwen35_transform(name: str, data: Lazy, hp: dict[str, Any]) -> tuple[str, Lazy]:
    if "linear_attn." in name:
        data = _reorder_linear_attention(name, data, hp)
    if name.endswith(".A_log"):  # exp in float64, rounded once: torch's float32 exp there
        data = data.map(lambda a: (-np.exp(a.astype(np.float64))).astype(a.dtype))
    elif name.endswith(".dt_bias"):
        name = name[: -len(".dt_bias")] + ".dt_proj.bias"
    elif "conv1d" in name:
        data = data.squeeze()
    elif name.endswith("norm.weight") and not name.endswith("linear_attn.norm.weight"):
        data = data.map(lambda a: a + 1.0)
    return name, data


def _tile_v_heads(a: np.ndarray, axis: int, n_k: int, per_k: int, head_dim: int) -> np.ndarray:
    """Value heads grouped by key head [k0v0, k0v1, k1v0, ...] to tiled [k0v0, k1v0, k0v1, ...]."""
    shape = list(a.shape)
    axis %= a.ndim
    split = shape[:axis] + [n_k, per_k, head_dim] + shape[axis + 1 :]
    return np.ascontiguousarray(np.swapaxes(a.reshape(split), axis, axis + 1)).reshape(shape)


def _reorder_linear_attention(name: str, data: Lazy, hp: dict[str, Any]) -> Lazy:
    n_k, n_v = hp["linear_num_key_heads"], hp["linear_num_value_heads"]
    if n_k == n_v:
        return data
    per_k, dk, dv = n_v // n_k, hp["linear_key_head_dim"], hp["linear_value_head_dim"]
    qk = 2 * n_k * dk

    def tile(axis: int, head_dim: int) -> Callable[[np.ndarray], np.ndarray]:
        return lambda a: _tile_v_heads(a, axis, n_k, per_k, head_dim)

    if ".in_proj_qkv." in name:
        v = data.rows(qk, data.shape[0]).map(tile(0, dv))
        return concat([data.rows(0, qk), v])
    if ".in_proj_z." in name:
        return data.map(tile(0, dv))
    if ".in_proj_b." in name or ".in_proj_a." in name:
        return data.map(tile(0, 1))
    if name.endswith((".A_log", ".dt_bias")) or ".dt_proj" in name:
        return (
            data.map(lambda a: tile(0, 1)(a.reshape(-1, 1)).reshape(a.shape))
            if data.ndim == 1
            else data.map(tile(-1, 1))
        )
    if ".conv1d" in name:
        flat = data.squeeze()
        return concat([flat.rows(0, qk), flat.rows(qk, flat.shape[0]).map(tile(0, dv))])
    if ".out_proj." in name:
        return data.map(tile(1, dv))
    return data
