"""Reading a few named tensors of a GGUF file into numpy, without mapping the rest.

A decision head is a handful of small tensors at the end of a possibly huge file. The `gguf`
package maps and describes every tensor (seconds on a large model); here the tensor table comes
from our header reader and only the wanted byte ranges are read.
"""

from __future__ import annotations

import math

import numpy as np

from llamactl.core.errors import ModelLoadError
from llamactl.core.gguf_info import GGUFInfo, TensorInfo

F32, F16, Q8_0, BF16 = 0, 1, 8, 30
_Q8_BLOCK = 32
_Q8_BYTES = 34  # an f16 scale, then 32 int8 quants


def tensor_nbytes(t: TensorInfo) -> int:
    """The stored size of a tensor of a type a head may use."""
    n = t.n_elements
    if t.ggml_type == F32:
        return 4 * n
    if t.ggml_type in (F16, BF16):
        return 2 * n
    if t.ggml_type == Q8_0:
        return n // _Q8_BLOCK * _Q8_BYTES
    raise ModelLoadError(
        f"head tensor {t.name} is stored as {t.type_name}; llamactl reads heads in F32, F16, "
        "BF16 or Q8_0"
    )


def _decode(raw: bytes, ggml_type: int, n: int) -> np.ndarray:
    if ggml_type == F32:
        return np.frombuffer(raw, "<f4", n).copy()
    if ggml_type == F16:
        return np.frombuffer(raw, "<f2", n).astype(np.float32)
    if ggml_type == BF16:
        bits = np.frombuffer(raw, "<u2", n).astype(np.uint32) << 16
        return bits.view(np.float32)
    blocks = np.frombuffer(raw, np.uint8).reshape(-1, _Q8_BYTES)
    scale = blocks[:, :2].copy().view("<f2").astype(np.float32)
    quants = blocks[:, 2:].view(np.int8).astype(np.float32)
    return (quants * scale).reshape(-1)


def read_tensors(info: GGUFInfo, names: list[str]) -> dict[str, np.ndarray]:
    """The tensors `names` of the file `info` describes, as float32 in numpy order (the ggml
    shape reversed: a weight of ggml shape (n_in, n_out) is an (n_out, n_in) matrix)."""
    table = {t.name: t for t in info.tensors}
    missing = [n for n in names if n not in table]
    if missing:
        raise ModelLoadError(f"{info.path.name} has no tensor {missing[0]!r}")
    out: dict[str, np.ndarray] = {}
    with open(info.path, "rb") as f:
        for name in names:
            t = table[name]
            size = tensor_nbytes(t)
            f.seek(info.data_offset + t.offset)
            raw = f.read(size)
            if len(raw) != size:
                raise ModelLoadError(f"{info.path.name}: tensor {name} is truncated")
            flat = _decode(raw, t.ggml_type, math.prod(t.shape))
            out[name] = flat.reshape(tuple(reversed(t.shape)))
    return out
