"""Writing a `GGUFPlan` to disk atomically, one tensor at a time.

The file is written under a temporary name in the target's directory and renamed over the
target only once complete and synced: an interrupted or failed conversion (Ctrl-C included)
leaves neither a half-written file at the target nor the temporary file behind, and an existing
target survives untouched.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np
from rich.console import Console

from .plan import GGUFPlan, OutType, byte_size, tensor_type
from .progress import TensorProgress


@dataclass(frozen=True)
class TensorRow:
    """One line of the tensor map (`--dry-run`)."""

    name: str
    shape: tuple[int, ...]  # ggml order (fastest dimension first), as llama.cpp prints it
    type: str
    nbytes: int
    source: str


@dataclass(frozen=True)
class WriteResult:
    path: Path
    n_tensors: int
    nbytes: int
    seconds: float


def tensor_map(plan: GGUFPlan, out: OutType) -> list[TensorRow]:
    rows = []
    for t in plan.tensors:
        q = tensor_type(t, out)
        rows.append(
            TensorRow(t.name, tuple(reversed(t.data.shape)), q.name, byte_size(t, q), t.data.source)
        )
    return rows


def temp_path(target: Path) -> Path:
    return target.with_name(f".{target.name}.{os.getpid()}.partial")


def write_plan(
    plan: GGUFPlan,
    target: Path,
    out: OutType,
    *,
    progress: bool = False,
    console: Console | None = None,
) -> WriteResult:
    """Write `plan` to `target` (atomically); progress on `console` when it is a terminal."""
    start = time.perf_counter()
    target = Path(target)
    tmp = temp_path(target)
    types = [tensor_type(t, out) for t in plan.tensors]
    sizes = [byte_size(t, q) for t, q in zip(plan.tensors, types, strict=True)]
    writer = gguf.GGUFWriter(None, plan.arch)
    try:
        for t, q, n in zip(plan.tensors, types, sizes, strict=True):
            writer.add_tensor_info(t.name, t.data.shape, np.dtype(np.float32), n, raw_dtype=q)
        plan.write_metadata(writer, out)
        writer.write_header_to_file(tmp)
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        with TensorProgress(sum(sizes), len(sizes), enabled=progress, console=console) as bar:
            for t, q, n in zip(plan.tensors, types, sizes, strict=True):
                writer.write_tensor_data(gguf.quants.quantize(t.data(), q))
                bar.step(t.name, n)
        _close(writer, sync=True)
        os.replace(tmp, target)
    except BaseException:
        _close(writer, sync=False)
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    return WriteResult(target, len(sizes), target.stat().st_size, time.perf_counter() - start)


def _close(writer: gguf.GGUFWriter, *, sync: bool) -> None:
    for f in writer.fout or []:
        if f.closed:
            continue
        if sync:
            f.flush()
            os.fsync(f.fileno())
        f.close()
    writer.fout = None
