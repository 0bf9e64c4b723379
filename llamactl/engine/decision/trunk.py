"""The trunk-only copy of a decision GGUF whose head the pinned llama.cpp refuses.

llama.cpp's loader refuses a file holding tensors its architecture does not load ("wrong number
of tensors"): kev's and MiniCPM-OCR-Jev's `cls.output`, d1-omni's head blocks and scorer. Such
files are copied once, without those tensors, into `$XDG_CACHE_HOME/llamactl/trunks/`; the
engine runs the copy and applies the head in numpy. The copy is raw: metadata entries and tensor
bytes are carried over as they are (only the few values `trunk_plan` names are re-encoded),
so it costs one sequential read and write of the file. A front end that wants to show the
copy's progress passes a `CopyProgress` factory (the engine draws nothing itself).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import struct
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from llamactl.core import paths
from llamactl.core.decision_heads import TrunkPlan
from llamactl.core.errors import ModelLoadError
from llamactl.core.gguf_info import (
    _SCALAR_STRUCTS,
    ARRAY,
    STRING,
    GGUFInfo,
    _Cursor,
    _skip_items,
    read_gguf_info,
)

log = logging.getLogger("llamactl.decision")

COPY_VERSION = 2  # bump when the copy's layout changes, so stale copies are not reused
_CHUNK = 8 << 20


class CopyProgress(Protocol):
    """Told once per tensor copied (the converters' `TensorProgress` is one)."""

    def step(self, name: str, nbytes: int) -> None: ...


# (total bytes, tensor count) -> a context manager that reports the copy's steps
ProgressFactory = Callable[[int, int], AbstractContextManager[CopyProgress]]


@dataclass(frozen=True)
class TrunkCopy:
    path: Path
    nbytes: int
    dropped: tuple[str, ...]
    made: bool  # False when an earlier copy was reused
    seconds: float


def trunk_dir() -> Path:
    return paths.cache_dir() / "trunks"


def trunk_path(src: Path) -> Path:
    """Where the copy of `src` lives: keyed by the source's path, size and mtime, so an
    edited or replaced model gets a fresh copy."""
    st = src.stat()
    key = f"{src.resolve()}|{st.st_size}|{st.st_mtime_ns}|{COPY_VERSION}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return trunk_dir() / f"{src.stem}.trunk-{digest}.gguf"


def ensure_trunk(
    info: GGUFInfo, plan: TrunkPlan, *, progress: ProgressFactory | None = None
) -> TrunkCopy:
    """The trunk-only copy of the file `info` describes, made now unless already cached."""
    start = time.perf_counter()
    target = trunk_path(info.path)
    if target.is_file():
        return TrunkCopy(target, target.stat().st_size, plan.head, False, 0.0)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.partial")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        write_trunk(info, plan, tmp, progress=progress)
        os.replace(tmp, target)
    except OSError as exc:
        raise ModelLoadError(
            f"cannot write the trunk-only copy of {info.path.name} to {target.parent}: "
            f"{exc.strerror or exc}"
        ) from exc
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    copy = TrunkCopy(target, target.stat().st_size, plan.head, True, time.perf_counter() - start)
    check = read_gguf_info(target)  # a copy we cannot read back is not left behind
    if check.tensor_count != info.tensor_count - len(plan.head):
        target.unlink()
        raise ModelLoadError(f"the trunk-only copy of {info.path.name} came out wrong")
    log.info(
        "made a trunk-only copy of %s (%.1f MiB, without %d head tensors) at %s in %.1f s",
        info.path.name,
        copy.nbytes / 2**20,
        len(plan.head),
        target,
        copy.seconds,
    )
    return copy


def write_trunk(
    info: GGUFInfo, plan: TrunkPlan, out_path: Path, *, progress: ProgressFactory | None = None
) -> None:
    """Write the copy `plan` describes (see `llamactl.core.decision_heads`) to `out_path`."""
    _write_copy(info, set(plan.head), plan.overrides, set(plan.drop_keys), out_path, progress)


# ------------------------------------------------------------------ writing
def _write_copy(
    info: GGUFInfo,
    head: set[str],
    overrides: dict[str, Any],
    drop_keys: set[str],
    out_path: Path,
    progress: ProgressFactory | None,
) -> None:
    alignment = info.metadata.get("general.alignment", 32)
    kept = [t for t in info.tensors if t.name not in head]
    spans = _data_spans(info)
    with open(info.path, "rb") as src, open(out_path, "wb") as out:
        kvs = [kv for kv in _kv_spans(src, info) if kv[0] not in drop_keys]
        header = bytearray(b"GGUF")
        header += struct.pack("<IQQ", 3, len(kept), len(kvs))
        for key, vtype, start, end in kvs:
            if key in overrides:
                header += _encode_kv(key, vtype, overrides[key], src, start)
            else:
                header += _read_at(src, start, end - start)
        offset = 0
        for t in kept:
            header += _string(t.name) + struct.pack("<I", len(t.shape))
            header += struct.pack(f"<{len(t.shape)}Q", *t.shape)
            header += struct.pack("<IQ", t.ggml_type, offset)
            offset += spans[t.name][1]
        header += b"\0" * (-len(header) % alignment)
        out.write(header)
        total = sum(spans[t.name][1] for t in kept)
        with progress(total, len(kept)) if progress else _no_bar() as bar:
            for t in kept:
                start, size = spans[t.name]
                _copy_range(src, out, info.data_offset + start, size)
                bar.step(t.name, size)


def _data_spans(info: GGUFInfo) -> dict[str, tuple[int, int]]:
    """(offset, padded size) of every tensor, from the offsets of the data section."""
    ordered = sorted(info.tensors, key=lambda t: t.offset)
    end = info.size_bytes - info.data_offset
    spans: dict[str, tuple[int, int]] = {}
    for t, nxt in zip(ordered, [*ordered[1:], None], strict=True):
        stop = nxt.offset if nxt is not None else end
        spans[t.name] = (t.offset, stop - t.offset)
    return spans


def _kv_spans(f: BinaryIO, info: GGUFInfo) -> list[tuple[str, int, int, int]]:
    """(key, value type, start, end) of every metadata entry, as bytes of the source file."""
    cur = _Cursor(f, info.path, info.size_bytes, 4)
    cur.u32()  # version
    cur.u64()  # tensor count
    n_kv = cur.u64()
    out = []
    for _ in range(n_kv):
        start = cur.tell()
        key = cur.string()
        vtype = cur.u32()
        if vtype == ARRAY:
            _skip_items(cur, info.path, cur.u32(), cur.u64(), key)
        elif vtype == STRING:
            cur.skip(cur.u64())
        else:
            cur.skip(_SCALAR_STRUCTS[vtype].size)
        out.append((key, vtype, start, cur.tell()))
    return out


def _encode_kv(key: str, vtype: int, value: Any, src: BinaryIO, start: int) -> bytes:
    """A metadata entry with a new value, in the value type (and item type) of the old one."""
    out = _string(key) + struct.pack("<I", vtype)
    if vtype == ARRAY:
        src.seek(start + 8 + len(key.encode()) + 4)
        (item_type,) = struct.unpack("<I", src.read(4))
        fmt = _SCALAR_STRUCTS.get(item_type)
        if fmt is None:
            raise ModelLoadError(f"cannot rewrite the metadata array {key!r}")
        items = list(value)
        return (
            out + struct.pack("<IQ", item_type, len(items)) + b"".join(fmt.pack(v) for v in items)
        )
    if vtype == STRING:
        return out + _string(str(value))
    return out + _SCALAR_STRUCTS[vtype].pack(value)


def _string(s: str) -> bytes:
    data = s.encode("utf-8")
    return struct.pack("<Q", len(data)) + data


def _read_at(f: BinaryIO, start: int, size: int) -> bytes:
    f.seek(start)
    return f.read(size)


def _copy_range(src: BinaryIO, out: BinaryIO, start: int, size: int) -> None:
    src.seek(start)
    while size:
        chunk = src.read(min(size, _CHUNK))
        if not chunk:
            raise ModelLoadError(f"{src.name} ended early while copying its trunk")
        out.write(chunk)
        size -= len(chunk)


class _NoBar:
    def step(self, name: str, nbytes: int) -> None:
        pass


@contextlib.contextmanager
def _no_bar():
    yield _NoBar()
