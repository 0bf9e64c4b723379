"""The one on-disk form of a sequence's state: slot files (`POST /slots/{id}?action=save`)
and the persistent prompt cache (`--cache-persist`) both write it.

A state is only meaningful in a context of the same weights and KV layout, and llama.cpp checks
little of that when it reads one back. So every file starts with a header naming what wrote
it, and a reader refuses a file whose header differs from its own context before it reads the
state. Layout (all integers little-endian):

    magic      8 bytes  b"LLKVST01"
    header_len u32      length of the JSON header that follows
    header     JSON     {"format": 1, "kind": "slot"|"cache", "identity": {...},
                         "n_tokens": N, "state_bytes": S,
                         "checkpoints": [{"n_tokens": n, "bytes": b}, ...], "crc32": C}
    tokens     N x i32  exactly what the sequence's KV holds, in order
    state      S bytes  llama_state_seq_get_data of the sequence
    checkpoint b bytes  each partial state (recurrent/SWA models), in the header's order

`crc32` covers everything after the header, so a truncated or altered file is detected before
llama.cpp sees it. Files are written to a temporary name and renamed into place, so a reader
never sees half a file.
"""

from __future__ import annotations

import ctypes
import json
import os
import struct
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from llamactl.core.errors import FileRefusedError
from llamactl.core.files import atomic_output, open_regular

from .prompt_cache import Checkpoint

__all__ = [
    "MAGIC",
    "SeqSnapshot",
    "StateFileCorrupt",
    "StateFileError",
    "StateFileMismatch",
    "StateIdentity",
    "empty_state",
    "model_identity",
    "read_state_file",
    "state_file_size",
    "write_state_file",
]

MAGIC = b"LLKVST01"
FORMAT = 1
MAX_HEADER = 1 << 20  # a header is a few hundred bytes; more means a foreign or broken file
_U32 = struct.Struct("<I")

Kind = Literal["slot", "cache"]


class StateFileError(Exception):
    """A state file that cannot be used; the message says why, for the user."""


class StateFileMismatch(StateFileError):
    """A sound file written for other weights or another KV layout."""


class StateFileCorrupt(StateFileError):
    """Not a state file, or a truncated or altered one."""


@dataclass(frozen=True)
class StateIdentity:
    """What a saved state depends on: the model file and the context's KV layout.

    The model is named by its resolved path, size and modification time (not a content hash:
    hashing a multi-GB GGUF at every start costs seconds, and a rewritten file changes its
    mtime; a moved or touched model therefore starts with no saved states, the safe side).
    """

    model_path: str
    model_size: int
    model_mtime_ns: int
    n_ctx_seq: int  # KV cells per sequence
    kv_type: str
    kv_unified: bool
    flash_attn: bool
    # the LoRA adapters' paths and scales the KV was computed under ("": none); left out of
    # the header when empty, so files written before adapters existed keep their identity
    lora: str = ""

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        if not self.lora:
            del out["lora"]
        return out

    def differences(self, other: dict[str, Any]) -> list[str]:
        """The fields where `other` (a file's header) differs from this identity."""
        absent = {"lora": ""}  # fields older headers lack
        return [k for k, v in asdict(self).items() if other.get(k, absent.get(k)) != v]

    def key(self) -> str:
        """A short stable name for this identity (file-name prefix of the persistent cache)."""
        blob = json.dumps(self.to_json(), sort_keys=True).encode()
        return f"{zlib.crc32(blob):08x}{zlib.adler32(blob):08x}"


def model_identity(path: str | os.PathLike[str]) -> tuple[str, int, int]:
    """The model file's resolved path, size and mtime (ns)."""
    p = Path(path).resolve()
    st = p.stat()
    return str(p), st.st_size, st.st_mtime_ns


@dataclass
class SeqSnapshot:
    """A sequence as saved: its tokens, its state, its checkpoints."""

    tokens: list[int]
    state: ctypes.Array
    checkpoints: list[Checkpoint] = field(default_factory=list)

    @property
    def nbytes(self) -> int:
        return len(self.state) + sum(c.nbytes for c in self.checkpoints)


def _header(identity: StateIdentity, snap: SeqSnapshot, kind: Kind, crc: int) -> bytes:
    return json.dumps(
        {
            "format": FORMAT,
            "kind": kind,
            "identity": identity.to_json(),
            "n_tokens": len(snap.tokens),
            "state_bytes": len(snap.state),
            "checkpoints": [{"n_tokens": c.n_tokens, "bytes": c.nbytes} for c in snap.checkpoints],
            "crc32": crc,
        }
    ).encode()


def state_file_size(identity: StateIdentity, snap: SeqSnapshot, *, kind: Kind) -> int:
    """At most the bytes `write_state_file` writes for `snap` (the checksum's digits vary),
    known before anything is written: what a quota is checked against."""
    header = _header(identity, snap, kind, 0xFFFFFFFF)
    return len(MAGIC) + _U32.size + len(header) + 4 * len(snap.tokens) + snap.nbytes


def write_state_file(path: Path, identity: StateIdentity, snap: SeqSnapshot, *, kind: Kind) -> int:
    """Write `snap` to `path` atomically; return the file's size in bytes."""
    tokens = struct.pack(f"<{len(snap.tokens)}i", *snap.tokens)
    parts: list[bytes | memoryview] = [tokens, memoryview(snap.state).cast("B")]
    parts += [memoryview(c.data).cast("B") for c in snap.checkpoints]
    crc = 0
    for part in parts:
        crc = zlib.crc32(part, crc)
    header = _header(identity, snap, kind, crc)
    with atomic_output(path) as f:
        f.write(MAGIC)
        f.write(_U32.pack(len(header)))
        f.write(header)
        for part in parts:
            f.write(part)
        size = f.tell()
    return size


def read_header(f: Any) -> dict[str, Any]:
    """The JSON header of an open state file (its position left at the tokens)."""
    if f.read(len(MAGIC)) != MAGIC:
        raise StateFileCorrupt("not a llamactl state file")
    raw = f.read(_U32.size)
    if len(raw) != _U32.size:
        raise StateFileCorrupt("the file is truncated")
    (n,) = _U32.unpack(raw)
    if n > MAX_HEADER:
        raise StateFileCorrupt("the file's header is too large")
    blob = f.read(n)
    if len(blob) != n:
        raise StateFileCorrupt("the file is truncated")
    try:
        header = json.loads(blob)
    except ValueError as exc:
        raise StateFileCorrupt("the file's header is not valid JSON") from exc
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise StateFileCorrupt("the file's format is not one this llamactl reads")
    return header


def read_state_file(path: Path, identity: StateIdentity) -> tuple[SeqSnapshot, int]:
    """The snapshot in `path` and the bytes read, if it was written for `identity`.

    Raises StateFileMismatch for another model or layout (checked before the body is read),
    StateFileCorrupt for anything unreadable, FileNotFoundError when there is no file. Only a
    regular file is read (a FIFO named like a state file would block the reader forever), and
    the sizes its header states are checked against the file's before its body is read (a
    header may claim terabytes).
    """
    try:
        f = open_regular(path)
    except FileRefusedError as exc:
        raise StateFileCorrupt(str(exc)) from None
    with f:
        file_size = os.fstat(f.fileno()).st_size
        header = read_header(f)
        theirs = header.get("identity")
        if not isinstance(theirs, dict):
            raise StateFileCorrupt("the file's header names no model")
        diff = identity.differences(theirs)
        if diff:
            detail = ", ".join(
                f"{k} {theirs.get(k)!r} (loaded: {getattr(identity, k)!r})" for k in diff
            )
            raise StateFileMismatch(f"the file was saved for another model or KV layout: {detail}")
        try:
            n_tokens = int(header["n_tokens"])
            state_bytes = int(header["state_bytes"])
            cps = [(int(c["n_tokens"]), int(c["bytes"])) for c in header["checkpoints"]]
            crc = int(header["crc32"])
        except (KeyError, TypeError, ValueError) as exc:
            raise StateFileCorrupt("the file's header is incomplete") from exc
        if min([n_tokens, state_bytes, *(b for _, b in cps)]) < 0:
            raise StateFileCorrupt("the file's header is inconsistent")
        stated = 4 * n_tokens + state_bytes + sum(b for _, b in cps)
        left = file_size - f.tell()
        if stated != left:
            raise StateFileCorrupt(
                f"the file is truncated: its header states {stated} bytes, {left} follow"
                if stated > left
                else "trailing bytes"
            )
        body = f.read(stated + 1)
        size = f.tell()
    expected = 4 * n_tokens + state_bytes + sum(b for _, b in cps)
    if len(body) != expected:
        raise StateFileCorrupt(
            "the file is truncated" if len(body) < expected else "trailing bytes"
        )
    if zlib.crc32(body) != crc:
        raise StateFileCorrupt("the file's checksum does not match its contents")
    view = memoryview(body)
    tokens = list(struct.unpack_from(f"<{n_tokens}i", view, 0))
    at = 4 * n_tokens
    state = _buffer(view[at : at + state_bytes])
    at += state_bytes
    checkpoints = []
    for n, b in cps:
        checkpoints.append(Checkpoint(n, _buffer(view[at : at + b])))
        at += b
    return SeqSnapshot(tokens, state, checkpoints), size


def _buffer(data: memoryview) -> ctypes.Array:
    """A ctypes copy, the form llama_state_seq_set_data takes."""
    if not len(data):
        return empty_state()
    return (ctypes.c_uint8 * len(data)).from_buffer_copy(data)


def empty_state() -> ctypes.Array:
    """The state of an empty sequence (nothing to give llama.cpp)."""
    return (ctypes.c_uint8 * 0)()
