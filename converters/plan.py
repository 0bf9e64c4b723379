"""What a conversion will write, decided before a byte is written.

A `GGUFPlan` is the architecture, the ordered tensors (each a `Lazy` with its GGUF name) and a
function that writes the metadata. The storage type of each tensor follows the rules of
llama.cpp's converter, so `--outtype` gives the same file it would.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

import gguf

from .lazy import Lazy

Q = gguf.GGMLQuantizationType


class OutType(str, Enum):
    """`--outtype`: the type of the large matrices; norms, biases and small tables stay F32."""

    F32 = "f32"
    F16 = "f16"
    BF16 = "bf16"
    Q8_0 = "q8_0"

    @property
    def file_type(self) -> gguf.LlamaFileType:
        return {
            OutType.F32: gguf.LlamaFileType.ALL_F32,
            OutType.F16: gguf.LlamaFileType.MOSTLY_F16,
            OutType.BF16: gguf.LlamaFileType.MOSTLY_BF16,
            OutType.Q8_0: gguf.LlamaFileType.MOSTLY_Q8_0,
        }[self]

    @property
    def tensor_type(self) -> gguf.GGMLQuantizationType:
        return {OutType.F32: Q.F32, OutType.F16: Q.F16, OutType.BF16: Q.BF16, OutType.Q8_0: Q.Q8_0}[
            self
        ]


# Tensors llama.cpp keeps in F32 whatever the file type (its quantizer skips them too).
_ALWAYS_F32 = re.compile(
    r"(^|\.)(ssm_conv1d|shortconv\.conv|ffn_gate_inp|ffn_gate_inp_shexp)\.weight$"
    r"|^token_types\.|^pos_embd\.|(^|\.)position_embd\.|^a\.position_embd"
)


@dataclass(frozen=True)
class OutTensor:
    name: str
    data: Lazy
    force: gguf.GGMLQuantizationType | None = None  # a family's own rule, checked first


@dataclass
class GGUFPlan:
    """One output file: `kind` is "model" or "mmproj"."""

    arch: str
    kind: str
    label: str  # e.g. "lfm2-d1 (lfm2)", for messages
    tensors: list[OutTensor]
    write_metadata: Callable[[gguf.GGUFWriter, OutType], None] = field(repr=False)
    head: tuple[str, ...] = ()  # tensors the pinned llama.cpp's arch does not load


def tensor_type(t: OutTensor, out: OutType) -> gguf.GGMLQuantizationType:
    """The storage type of one tensor, by llama.cpp converter's rules."""
    if t.force is not None:
        return t.force
    if t.data.ndim <= 1 or t.name.endswith("_norm.weight"):
        return Q.F32
    if _ALWAYS_F32.search(t.name) or not t.name.endswith(".weight"):
        return Q.F32
    qtype = out.tensor_type
    if qtype == Q.Q8_0 and t.data.shape[-1] % gguf.GGML_QUANT_SIZES[Q.Q8_0][0] != 0:
        return Q.F16  # what the reference converter falls back to for odd rows
    return qtype


def byte_size(t: OutTensor, qtype: gguf.GGMLQuantizationType) -> int:
    n = 1
    for d in gguf.quant_shape_to_byte_shape(t.data.shape, qtype):
        n *= d
    return n


def mmproj_patch_type(out: OutType) -> gguf.GGMLQuantizationType:
    """Patch-embedding convolutions: F16 in an f16 file, else F32 (ggml's conv needs a float)."""
    return Q.F16 if out == OutType.F16 else Q.F32
