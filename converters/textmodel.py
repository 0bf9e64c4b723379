"""Metadata and tensor naming every language-model trunk shares, as llama.cpp's converter
writes them: `general.*` from the model card, the base hyperparameters, and HF tensor names
mapped to GGUF names through gguf-py's own tables."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf

from llamactl.core.errors import CheckpointError

from .checkpoint import Checkpoint
from .plan import OutType


def write_general(w: gguf.GGUFWriter, *, kind: str, card_dir: Path) -> None:
    """`general.type`, then name, size label and what the model card says."""
    w.add_type(gguf.GGUFType.MMPROJ if kind == "mmproj" else gguf.GGUFType.MODEL)
    total, shared, expert, n_expert = w.get_total_parameter_count()
    meta = gguf.Metadata.load(None, card_dir, None, total)
    if meta.name is None:
        meta.name = card_dir.name
    if meta.size_label is None and total > 0:
        meta.size_label = gguf.size_label(total, shared, expert, n_expert)
    meta.set_gguf_meta_model(w)


def find(hp: dict[str, Any], keys: list[str]) -> Any:
    return next((hp[k] for k in keys if k in hp), None)


def rope_parameters(hp: dict[str, Any]) -> dict[str, Any]:
    """`rope_parameters` (or the older `rope_scaling`), with `rope_theta` mirrored into it."""
    params = dict(hp.get("rope_parameters") or hp.get("rope_scaling") or {})
    theta = find(hp, ["global_rope_theta", "rope_theta", "rotary_emb_base"])
    if "rope_theta" not in params and theta is not None:
        params["rope_theta"] = theta
    if "rope_type" not in params and "type" in params:
        params["rope_type"] = params["type"]
    return params


def write_base_hparams(
    w: gguf.GGUFWriter,
    hp: dict[str, Any],
    out: OutType,
    *,
    block_count: int,
    head_count_kv: int | list[int] | None = None,
    feed_forward: int | list[int] | None = None,
) -> None:
    """The keys of llama.cpp's `TextModel.set_gguf_parameters`, for the hparams we meet."""
    w.add_block_count(block_count)
    if (n_ctx := find(hp, ["max_position_embeddings", "n_ctx", "n_positions"])) is not None:
        w.add_context_length(n_ctx)
    if (n_embd := find(hp, ["hidden_size", "n_embd"])) is not None:
        w.add_embedding_length(n_embd)
    n_ff = feed_forward if feed_forward is not None else find(hp, ["intermediate_size"])
    if n_ff is not None:
        w.add_feed_forward_length(n_ff)
    if (n_head := find(hp, ["num_attention_heads", "n_head"])) is not None:
        w.add_head_count(n_head)
    n_kv = head_count_kv if head_count_kv is not None else find(hp, ["num_key_value_heads"])
    if n_kv is not None:
        w.add_head_count_kv(n_kv)
    if hp.get("is_causal") is False:
        w.add_causal_attention(False)
    rope = rope_parameters(hp)
    if "mrope_section" in rope:
        sections = [int(x) for x in rope["mrope_section"]][:4]
        w.add_rope_dimension_sections(sections + [0] * (4 - len(sections)))
    if (theta := rope.get("rope_theta")) is not None:
        w.add_rope_freq_base(theta)
    if (eps := find(hp, ["rms_norm_eps", "norm_eps"])) is not None:
        w.add_layer_norm_rms_eps(eps)
    if (head_dim := hp.get("head_dim")) is not None:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    w.add_file_type(out.file_type)


def gguf_name(
    tmap: gguf.TensorNameMap, name: str, ckpt: Checkpoint, *, hf_name: str, arch: str
) -> str:
    """The GGUF name of a (renamed) HF tensor; an unknown tensor is a checkpoint error."""
    mapped = tmap.get_name(name, try_suffixes=(".weight", ".bias"))
    if mapped is None:
        file = ckpt.tensor_entries[hf_name].file if hf_name in ckpt.tensor_entries else ckpt.dir
        raise CheckpointError(file, hf_name, f"unexpected tensor for a {arch} model")
    return mapped
