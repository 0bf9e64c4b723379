"""Decision heads applied in numpy to the trunk's hidden states.

The pinned llama.cpp runs the trunk (it loads no `cls.output` for lfm2 / qwen35, nor
d1-omni's head blocks); the heads are small, so numpy applies them to the rows the engine reads:
- `ClassifierHead` (MiniCPM-OCR-Jev): class scores from the last token, W·h (+ b);
- `PointerHead` (kev): [q | k] = W·h + b; option j scores q(last)·k(marker j) / sqrt(d);
- `OmniHead` (d1-omni): pre-norm transformer blocks (LayerNorm, fused QKV, bidirectional
  attention, a GELU MLP) over the whole sequence, then the option scorer at each marker with
  the question type's embedding added: LayerNorm, dense, GELU, one output per type column.
  The block and scorer wiring is inferred from the checkpoint's tensors (the spec names them,
  not their graph); see docs/decisions.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from llamactl.core.errors import ModelLoadError


def erf(x: np.ndarray) -> np.ndarray:
    """Abramowitz & Stegun 7.1.26 (error below 1.5e-7): numpy has no erf."""
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (
        0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    )
    return sign * (1.0 - poly * np.exp(-a * a))


def gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))


def layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def linear(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    y = x @ w.T
    return y + b if b is not None else y


@dataclass(frozen=True)
class ClassifierHead:
    weight: np.ndarray  # (n_classes, n_embd)
    bias: np.ndarray | None = None

    def scores(self, hidden: np.ndarray) -> np.ndarray:
        return linear(hidden, self.weight, self.bias)


@dataclass(frozen=True)
class PointerHead:
    weight: np.ndarray  # (2 * head_dim, n_embd): q rows, then k rows
    bias: np.ndarray

    def scores(self, last: np.ndarray, markers: np.ndarray) -> np.ndarray:
        half = self.weight.shape[0] // 2
        q = linear(last, self.weight[:half], self.bias[:half])
        k = linear(markers, self.weight[half:], self.bias[half:])
        return k @ q / np.sqrt(half)


@dataclass(frozen=True)
class HeadBlock:
    t: Mapping[str, np.ndarray]  # attn_norm, attn_qkv, attn_output, ffn_norm, ffn_up, ffn_down
    n_head: int
    eps: float

    def __call__(self, x: np.ndarray) -> np.ndarray:
        t = self.t
        h = layer_norm(x, t["attn_norm.weight"], t["attn_norm.bias"], self.eps)
        qkv = linear(h, t["attn_qkv.weight"], t["attn_qkv.bias"])
        n, width = x.shape
        d = width // self.n_head
        q, k, v = (qkv[:, i * width : (i + 1) * width].reshape(n, self.n_head, d) for i in range(3))
        att = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(d)
        att = np.exp(att - att.max(axis=-1, keepdims=True))
        att /= att.sum(axis=-1, keepdims=True)
        ctx = np.einsum("hqk,khd->qhd", att, v).reshape(n, width)
        x = x + linear(ctx, t["attn_output.weight"], t["attn_output.bias"])
        h = layer_norm(x, t["ffn_norm.weight"], t["ffn_norm.bias"], self.eps)
        h = linear(gelu(linear(h, t["ffn_up.weight"], t["ffn_up.bias"])), t["ffn_down.weight"])
        return x + h + t["ffn_down.bias"]


BLOCK_PARTS = ("attn_norm", "attn_qkv", "attn_output", "ffn_norm", "ffn_up", "ffn_down")


@dataclass(frozen=True)
class OmniHead:
    blocks: Sequence[HeadBlock]
    type_embd: np.ndarray  # (3, n_embd): choice, score, noul
    scorer: Mapping[str, np.ndarray]  # cls.norm.*, cls.*, cls.output.*
    eps: float

    @classmethod
    def from_tensors(
        cls, t: Mapping[str, np.ndarray], n_trunk: int, n_blocks: int, n_head: int, eps: float
    ) -> OmniHead:
        blocks = []
        for i in range(n_trunk, n_trunk + n_blocks):
            parts = {
                f"{p}.{s}": t[f"blk.{i}.{p}.{s}"] for p in BLOCK_PARTS for s in ("weight", "bias")
            }
            blocks.append(HeadBlock(parts, n_head, eps))
        scorer = {k: v for k, v in t.items() if k.startswith("cls.")}
        if t["token_types.weight"].shape[0] != 3:
            raise ModelLoadError("d1-omni's token_types must have 3 rows (choice, score, noul)")
        return cls(tuple(blocks), t["token_types.weight"], scorer, eps)

    @staticmethod
    def tensor_names(n_trunk: int, n_blocks: int) -> list[str]:
        names = [
            f"blk.{i}.{p}.{s}"
            for i in range(n_trunk, n_trunk + n_blocks)
            for p in BLOCK_PARTS
            for s in ("weight", "bias")
        ]
        scorer = [f"cls{p}.{s}" for p in (".norm", "", ".output") for s in ("weight", "bias")]
        return [*names, "token_types.weight", *scorer]

    def scores(self, hidden: np.ndarray, markers: Sequence[int], column: int) -> np.ndarray:
        x = hidden.astype(np.float32)
        for block in self.blocks:
            x = block(x)
        s = self.scorer
        h = x[list(markers)] + self.type_embd[column]
        h = layer_norm(h, s["cls.norm.weight"], s["cls.norm.bias"], self.eps)
        h = gelu(linear(h, s["cls.weight"], s["cls.bias"]))
        return linear(h, s["cls.output.weight"], s["cls.output.bias"])[:, 0]
