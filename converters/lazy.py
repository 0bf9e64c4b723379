"""Tensors that know their shape before their data exists.

The whole conversion is planned first (names, shapes, types: enough for `--dry-run` and for
the GGUF header), and each tensor is computed only when its turn comes to be written, so a
large checkpoint never sits in memory at once. Every operation here states its output shape.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


@dataclass(frozen=True)
class Lazy:
    """A float32 array still to be computed: its shape, where it comes from, and how."""

    shape: tuple[int, ...]
    compute: Callable[[], np.ndarray] = field(repr=False)
    source: str = ""  # e.g. "model.layers.0.mlp.up_proj.weight (BF16)", shown by --dry-run
    dtype: str = "F32"  # the source's storage type

    def __call__(self) -> np.ndarray:
        arr = np.asarray(self.compute(), dtype=np.float32)
        if arr.shape != self.shape:  # a planning bug, never a user error
            raise AssertionError(f"{self.source}: planned {self.shape}, computed {arr.shape}")
        return arr

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        return _numel(self.shape)

    def map(self, fn: Callable[[np.ndarray], np.ndarray]) -> Lazy:
        """An elementwise (shape-keeping) transform."""
        return Lazy(self.shape, lambda: fn(self()), self.source, self.dtype)

    def apply(self, fn: Callable[[np.ndarray], np.ndarray], shape: Sequence[int]) -> Lazy:
        """A transform whose output shape the caller states."""
        return Lazy(tuple(shape), lambda: fn(self()), self.source, self.dtype)

    def reshape(self, *shape: int) -> Lazy:
        dims = list(shape)
        if -1 in dims:
            known = _numel([d for d in dims if d != -1])
            dims[dims.index(-1)] = self.numel // known
        if _numel(dims) != self.numel:
            raise ValueError(f"{self.source}: cannot reshape {self.shape} to {tuple(shape)}")
        return self.apply(lambda a: a.reshape(dims), dims)

    def squeeze(self, axis: int | None = None) -> Lazy:
        if axis is None:
            dims = [d for d in self.shape if d != 1]
        else:
            if self.shape[axis] != 1:
                return self
            dims = [d for i, d in enumerate(self.shape) if i != axis % self.ndim]
        return self.apply(lambda a: a.reshape(dims), dims)

    def transpose(self, *axes: int) -> Lazy:
        dims = [self.shape[a] for a in axes]
        return self.apply(lambda a: np.ascontiguousarray(a.transpose(axes)), dims)

    def rows(self, start: int, stop: int) -> Lazy:
        """A slice along the first axis."""
        dims = (stop - start, *self.shape[1:])
        return self.apply(lambda a: a[start:stop], dims)

    def take(self, axis: int, index: int) -> Lazy:
        """One index along `axis`, which disappears (like `a[:, :, i]`)."""
        dims = [d for i, d in enumerate(self.shape) if i != axis]
        return self.apply(lambda a: np.take(a, index, axis=axis), dims)


def concat(parts: Sequence[Lazy], axis: int = 0) -> Lazy:
    """Join along `axis`; the source label lists every part."""
    first = parts[0]
    dims = list(first.shape)
    dims[axis] = sum(p.shape[axis] for p in parts)
    source = " + ".join(dict.fromkeys(p.source for p in parts))
    return Lazy(
        tuple(dims), lambda: np.concatenate([p() for p in parts], axis=axis), source, first.dtype
    )


def constant(values: np.ndarray, source: str) -> Lazy:
    """Data made by the converter itself (a merged head, a computed table)."""
    arr = np.asarray(values, dtype=np.float32)
    return Lazy(arr.shape, lambda: arr, source, "F32")
