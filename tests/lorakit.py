"""A tiny LoRA adapter GGUF for the embedded SmolLM2, written with `gguf` as llama.cpp's
convert_lora_to_gguf.py lays one out: general.type "adapter", adapter.type "lora",
adapter.lora.alpha, and `<tensor>.lora_a` (r x n_in) / `<tensor>.lora_b` (n_out x r) pairs for
the base tensors it targets, with shapes read from the model's own tensor table."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from llamactl.core.gguf_info import read_gguf_info

__all__ = ["LORA_TARGETS", "write_lora_gguf"]

LORA_TARGETS = ("attn_q", "attn_v", "ffn_up")


def write_lora_gguf(
    path: Path,
    base: Path,
    *,
    rank: int = 32,
    alpha: float = 8.0,
    std: float = 0.03,
    seed: int = 3,
    arch: str | None = None,
    qtype: str = "F16",
) -> Path:
    """Write the adapter over `base` (atomically); `arch` overrides the architecture key."""
    import gguf

    info = read_gguf_info(base)
    rng = np.random.default_rng(seed)
    tmp = path.with_suffix(".tmp")
    writer = gguf.GGUFWriter(str(tmp), arch or info.architecture or "llama")
    writer.add_type("adapter")
    writer.add_string("adapter.type", "lora")
    writer.add_float32("adapter.lora.alpha", alpha)
    writer.add_string("adapter.lora.task_name", "test-task")
    for t in info.tensors:
        stem = t.name.removesuffix(".weight")
        if not t.name.startswith("blk.") or stem.rsplit(".", 1)[-1] not in LORA_TARGETS:
            continue
        n_in, n_out = t.shape  # ggml order: ne0 is the input width
        a = (rng.standard_normal((rank, n_in)) * std).astype(np.float32)
        b = (rng.standard_normal((n_out, rank)) * std).astype(np.float32)
        for name, arr in ((f"{t.name}.lora_a", a), (f"{t.name}.lora_b", b)):
            kind = gguf.GGMLQuantizationType[qtype]
            if kind == gguf.GGMLQuantizationType.F32:
                writer.add_tensor(name, arr)
            else:
                writer.add_tensor(name, gguf.quants.quantize(arr, kind), raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(tmp, path)
    return path
