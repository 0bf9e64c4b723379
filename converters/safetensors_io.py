"""The safetensors format read and written with numpy alone (no torch, no safetensors wheel).

The format is an 8-byte little-endian header length, a JSON header naming each tensor's dtype,
shape and byte range, then the raw bytes. Reading maps the file, so a tensor costs memory only
when it is converted. numpy has no bfloat16: BF16 is widened to float32 on read (exact) and
rounded to nearest-even on write.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from llamactl.core.errors import CheckpointError

_NUMPY_DTYPES: dict[str, np.dtype] = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),  # raw bits; widened by `bf16_to_f32`
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}
_HEADER_LIMIT = 100 * 1024 * 1024  # the format's own cap on the JSON header


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    """bfloat16 is the top half of a float32: shifting the bits back is exact."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(values: np.ndarray) -> np.ndarray:
    """Round float32 to bfloat16 bits (nearest, ties to even), keeping NaN a NaN."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = (bits + (0x7FFF + ((bits >> 16) & 1))) >> 16
    nan = np.isnan(values)
    return np.where(nan, (bits >> 16) | 0x40, rounded).astype(np.uint16)


@dataclass(frozen=True)
class TensorEntry:
    """Where one tensor lives in a safetensors file."""

    file: Path
    name: str
    dtype: str
    shape: tuple[int, ...]
    start: int  # absolute byte offsets in the file
    end: int


class SafetensorsFile:
    """One mapped safetensors file; `load` returns float32/float16 arrays (BF16 widened)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.entries, self.metadata = _read_header(self.path)
        self._mmap: mmap.mmap | None = None

    def _buffer(self) -> mmap.mmap:
        if self._mmap is None:
            with open(self.path, "rb") as f:
                size = self.path.stat().st_size
                self._mmap = (
                    mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else mmap.mmap(-1, 1)
                )
        return self._mmap

    def raw(self, name: str) -> np.ndarray:
        """The stored array as is (BF16 as uint16 bits), read-only and backed by the map."""
        e = self.entries[name]
        flat = np.frombuffer(
            self._buffer(), dtype=_NUMPY_DTYPES[e.dtype], count=_numel(e.shape), offset=e.start
        )
        return flat.reshape(e.shape)

    def load(self, name: str) -> np.ndarray:
        """The tensor as a float array numpy can compute with."""
        e = self.entries[name]
        arr = self.raw(name)
        if e.dtype == "BF16":
            return bf16_to_f32(arr)
        return np.array(arr)  # a copy: the map can then close whatever callers keep

    def close(self) -> None:
        if self._mmap is not None:
            with contextlib.suppress(BufferError):  # views from `raw` still alive: GC unmaps
                self._mmap.close()
            self._mmap = None


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _read_header(path: Path) -> tuple[dict[str, TensorEntry], dict[str, str]]:
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            prefix = f.read(8)
            if len(prefix) < 8:
                raise CheckpointError(path, None, "not a safetensors file (shorter than 8 bytes)")
            (n,) = struct.unpack("<Q", prefix)
            if n > _HEADER_LIMIT or 8 + n > size:
                raise CheckpointError(path, None, "not a safetensors file (bad header length)")
            header = json.loads(f.read(n))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        if isinstance(exc, OSError) and not path.exists():
            raise CheckpointError(path, None, "file not found") from None
        raise CheckpointError(path, None, f"not a readable safetensors file ({exc})") from None
    if not isinstance(header, dict):
        raise CheckpointError(path, None, "not a safetensors file (header is not an object)")
    metadata = header.pop("__metadata__", None) or {}
    base = 8 + n
    entries: dict[str, TensorEntry] = {}
    for name, info in header.items():
        entries[name] = _entry(path, name, info, base, size)
    return entries, metadata


def _entry(path: Path, name: str, info: Any, base: int, size: int) -> TensorEntry:
    try:
        dtype = info["dtype"]
        shape = tuple(int(d) for d in info["shape"])
        begin, end = (int(x) for x in info["data_offsets"])
    except (KeyError, TypeError, ValueError):
        raise CheckpointError(path, name, "malformed tensor entry in the header") from None
    if dtype not in _NUMPY_DTYPES:
        raise CheckpointError(path, name, f"unsupported dtype {dtype}")
    expected = _numel(shape) * _NUMPY_DTYPES[dtype].itemsize
    if end - begin != expected or base + end > size or begin < 0:
        raise CheckpointError(
            path, name, f"byte range {begin}..{end} does not hold a {dtype} tensor of {shape}"
        )
    return TensorEntry(path, name, dtype, shape, base + begin, base + end)


def save_file(
    tensors: Mapping[str, np.ndarray],
    path: Path,
    *,
    bf16: bool = False,
    metadata: Mapping[str, str] | None = None,
) -> None:
    """Write `tensors` in order; with `bf16`, float32 arrays are stored as BF16."""
    header: dict[str, Any] = {}
    blobs: list[bytes] = []
    offset = 0
    for name, arr in tensors.items():
        arr = np.asarray(arr)
        if bf16 and arr.dtype == np.float32:
            data, dtype = f32_to_bf16(arr).tobytes(), "BF16"
        else:
            dtype = next(k for k, v in _NUMPY_DTYPES.items() if v == arr.dtype and k != "BF16")
            data = np.ascontiguousarray(arr).tobytes()
        header[name] = {
            "dtype": dtype,
            "shape": list(arr.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        blobs.append(data)
        offset += len(data)
    if metadata:
        header["__metadata__"] = dict(metadata)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # keep the data 8-byte aligned, as the reference writer does
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for blob in blobs:
            f.write(blob)
