"""The LFM2 trunk (hybrid short-convolution + attention) in llama.cpp's `lfm2` layout.

Hyperparameters as llama.cpp's LFM2 converter computes them (the feed-forward size adjusted
like the model code does, `head_count_kv` per layer with 0 on convolution layers), tensor
names through gguf-py's LFM2 table, convolution kernels squeezed to 2-D.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gguf

from llamactl.core.errors import CheckpointError

from .checkpoint import Checkpoint, merged_text_config
from .plan import OutTensor, OutType
from .textmodel import gguf_name, write_base_hparams

ARCH = gguf.MODEL_ARCH.LFM2
PRE = "lfm2"


@dataclass(frozen=True)
class Lfm2Trunk:
    hp: dict[str, Any]
    layer_types: list[str]
    n_layers: int
    ff: int
    n_embd: int
    n_head: int
    n_kv: int


def read_trunk(
    ckpt: Checkpoint, config: dict[str, Any] | None = None, *, where: str | None = None
) -> Lfm2Trunk:
    """LFM2 hyperparameters from config.json (its `text_config` for LFM2-VL checkpoints)."""
    config = ckpt.config if config is None else config
    if where is None:
        where = "text_config." if isinstance(config.get("text_config"), dict) else ""
    hp = merged_text_config(config)

    def need(key: str, kind: type | tuple[type, ...]) -> Any:
        return ckpt.field(hp, key, kind, where=where)

    n_layers = need("num_hidden_layers", int)
    for key in (
        "hidden_size",
        "num_attention_heads",
        "num_key_value_heads",
        "vocab_size",
        "conv_L_cache",
    ):
        need(key, int)
    need("norm_eps", (int, float))
    layer_types = hp.get("layer_types")
    if layer_types is None and isinstance(hp.get("full_attn_idxs"), list):
        idxs = set(hp["full_attn_idxs"])
        layer_types = ["full_attention" if i in idxs else "conv" for i in range(n_layers)]
    if not isinstance(layer_types, list) or len(layer_types) != n_layers:
        raise CheckpointError(
            ckpt.dir / "config.json",
            f"{where}layer_types",
            f"expected a list of {n_layers} layer types",
        )
    return Lfm2Trunk(
        hp,
        [str(t) for t in layer_types],
        n_layers,
        _ff_dim(ckpt, hp, where),
        hp["hidden_size"],
        hp["num_attention_heads"],
        hp["num_key_value_heads"],
    )


def _ff_dim(ckpt: Checkpoint, hp: dict[str, Any], where: str) -> int:
    """The feed-forward width the LFM2 model code really builds."""
    key = "block_ff_dim" if "block_ff_dim" in hp else "intermediate_size"
    ff = ckpt.field(hp, key, int, where=where)
    if hp.get("block_auto_adjust_ff_dim"):
        ff = int(2 * ff / 3)
        if (mult := hp.get("block_ffn_dim_multiplier")) is not None:
            ff = int(mult * ff)
        multiple = ckpt.field(hp, "block_multiple_of", int, where=where)
        ff = multiple * ((ff + multiple - 1) // multiple)
    return ff


def write_hparams(
    w: gguf.GGUFWriter, t: Lfm2Trunk, out: OutType, *, head_layers: int = 0, head_ff: int = 0
) -> None:
    """llama.cpp's LFM2 keys; `head_layers` extra blocks (d1-omni) extend the per-layer arrays."""
    kv = [t.n_kv if lt != "conv" else 0 for lt in t.layer_types] + [t.n_head] * head_layers
    ff: int | list[int] = t.ff if not head_layers else [t.ff] * t.n_layers + [head_ff] * head_layers
    write_base_hparams(
        w, t.hp, out, block_count=t.n_layers + head_layers, head_count_kv=kv, feed_forward=ff
    )
    w.add_vocab_size(t.hp["vocab_size"])
    w.add_shortconv_l_cache(t.hp["conv_L_cache"])


def default_rename(name: str) -> str | None:
    """HF names of LFM2 and LFM2-VL checkpoints to LFM2 ones; vision/audio parts dropped."""
    if any(p in name for p in ("vision_tower", "multi_modal_projector", "audio_tower")):
        return None
    return name.replace("model.language_model.", "model.").replace("language_model.", "")


def trunk_tensors(
    ckpt: Checkpoint, t: Lfm2Trunk, rename: Callable[[str], str | None] = default_rename
) -> list[OutTensor]:
    """Every trunk weight with its GGUF name, in checkpoint order."""
    tmap = gguf.get_tensor_name_map(ARCH, t.n_layers)
    out: list[OutTensor] = []
    for hf_name in ckpt.tensor_names():
        name = rename(hf_name)
        if name is None:
            continue
        data = ckpt.lazy(hf_name)
        if "conv.conv" in name:
            data = data.squeeze(1)  # ggml's short convolution takes a 2-D kernel
        out.append(OutTensor(gguf_name(tmap, name, ckpt, hf_name=hf_name, arch="lfm2"), data))
    return out
