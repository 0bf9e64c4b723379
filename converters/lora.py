"""A PEFT LoRA adapter merged into its base weights: W + (alpha / r) * B @ A.

Only a plain LoRA merges that way, so anything else (bias, DoRA, rsLoRA, per-module ranks,
modules saved whole) is refused with the adapter_config.json field named. Adapter tensors are
matched to base weights by the part of their name from `layers.` on; every adapter tensor must
find its base weight, and its shapes must fit it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from llamactl.core.errors import CheckpointError

from .checkpoint import Checkpoint
from .lazy import Lazy
from .safetensors_io import SafetensorsFile

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"


@dataclass
class LoraAdapter:
    dir: Path
    scale: float
    pairs: dict[str, tuple[str, str]]  # "layers.0.mlp.up_proj.weight" -> (A name, B name)
    weights: SafetensorsFile
    base_model: str
    merged: set[str]

    def source(self, base: Checkpoint) -> Callable[[str], Lazy]:
        """A tensor loader for `base` that merges the adapter into the weights it targets."""

        def load(name: str) -> Lazy:
            data = base.lazy(name)
            key = name[name.index("layers.") :] if "layers." in name else None
            if key is None or key not in self.pairs:
                return data
            a_name, b_name = self.pairs[key]
            a_shape = self.weights.entries[a_name].shape
            b_shape = self.weights.entries[b_name].shape
            if data.shape != (b_shape[0], a_shape[1]) or a_shape[0] != b_shape[1]:
                raise CheckpointError(
                    self.dir / ADAPTER_WEIGHTS,
                    a_name,
                    f"LoRA A {a_shape} / B {b_shape} do not fit the base "
                    f"weight {name} {data.shape}",
                )
            self.merged.add(key)
            scale = self.scale

            def merge(w: np.ndarray) -> np.ndarray:
                a = self.weights.load(a_name).astype(np.float32)
                b = self.weights.load(b_name).astype(np.float32)
                return w + scale * (b @ a)

            return Lazy(data.shape, lambda: merge(data()), f"{data.source} + LoRA", data.dtype)

        return load

    def check_all_merged(self) -> None:
        missing = sorted(set(self.pairs) - self.merged)
        if missing:
            a_name = self.pairs[missing[0]][0]
            raise CheckpointError(
                self.dir / ADAPTER_WEIGHTS,
                a_name,
                f"no base weight {missing[0]} to merge into (only "
                f"{len(self.merged)} of {len(self.pairs)} LoRA pairs matched)",
            )


def read_adapter(adapter: Checkpoint) -> LoraAdapter:
    cfg = adapter.json(ADAPTER_CONFIG)
    file = adapter.dir / ADAPTER_CONFIG
    if cfg.get("peft_type") != "LORA":
        raise CheckpointError(file, "peft_type", f'expected "LORA", got {cfg.get("peft_type")!r}')
    if cfg.get("bias", "none") != "none":
        raise CheckpointError(file, "bias", "a LoRA with trained biases cannot be merged as B @ A")
    for key in (
        "use_dora",
        "use_rslora",
        "lora_bias",
        "rank_pattern",
        "alpha_pattern",
        "modules_to_save",
    ):
        if cfg.get(key):
            raise CheckpointError(file, key, "only a plain LoRA can be merged (W + alpha/r * B@A)")
    r = adapter.field(cfg, "r", int, file=ADAPTER_CONFIG)
    alpha = adapter.field(cfg, "lora_alpha", (int, float), file=ADAPTER_CONFIG)
    if r <= 0:
        raise CheckpointError(file, "r", f"must be positive, got {r}")
    base_model = str(cfg.get("base_model_name_or_path") or "")
    weights = SafetensorsFile(adapter.dir / ADAPTER_WEIGHTS)
    halves: dict[str, dict[str, str]] = {}
    for name in weights.entries:
        if "layers." not in name:
            raise CheckpointError(
                weights.path, name, "a LoRA tensor outside the layers cannot be merged"
            )
        key, _, part = name[name.index("layers.") :].partition(".lora_")
        if part not in ("A.weight", "B.weight"):
            raise CheckpointError(weights.path, name, "expected lora_A.weight or lora_B.weight")
        halves.setdefault(key + ".weight", {})[part[0]] = name
    pairs: dict[str, tuple[str, str]] = {}
    for key, parts in halves.items():
        if set(parts) != {"A", "B"}:
            raise CheckpointError(
                weights.path, next(iter(parts.values())), "LoRA A and B must come in pairs"
            )
        pairs[key] = (parts["A"], parts["B"])
    return LoraAdapter(adapter.dir, alpha / r, pairs, weights, base_model, set())
