"""Read a GGUF file's header, metadata and tensor table without touching the tensor data.

Listing models, checking a --model argument or showing a model card must not cost a model load,
so this parses only the front of the file with `struct`. Big metadata arrays (a vocabulary of
150k tokens, its merges) are skipped and stay on disk as `GGUFArray` until someone reads them.

Format: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md (v2 and v3, little-endian).
"""

from __future__ import annotations

import math
import os
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from .decision_keys import has_decision_type
from .errors import ModelLoadError, ModelNotFoundError

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
# Arrays longer than this are left on disk until used; 1024 keeps small lists (languages,
# per-layer sizes) as plain lists while vocabularies stay lazy.
LAZY_ARRAY_MIN = 1024
_CHUNK = 1 << 20

# GGUF metadata value types.
UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = (
    range(13)
)
VALUE_TYPE_NAMES = {
    UINT8: "uint8",
    INT8: "int8",
    UINT16: "uint16",
    INT16: "int16",
    UINT32: "uint32",
    INT32: "int32",
    FLOAT32: "float32",
    BOOL: "bool",
    STRING: "string",
    ARRAY: "array",
    UINT64: "uint64",
    INT64: "int64",
    FLOAT64: "float64",
}
_SCALAR_FORMATS = {
    UINT8: "B",
    INT8: "b",
    UINT16: "H",
    INT16: "h",
    UINT32: "I",
    INT32: "i",
    FLOAT32: "f",
    BOOL: "?",
    UINT64: "Q",
    INT64: "q",
    FLOAT64: "d",
}
_SCALAR_STRUCTS = {t: struct.Struct("<" + f) for t, f in _SCALAR_FORMATS.items()}
# Smallest encoding of one item, to reject absurd counts before allocating anything.
_MIN_ITEM_SIZE = {**{t: s.size for t, s in _SCALAR_STRUCTS.items()}, STRING: 8, ARRAY: 12}
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")

# ggml tensor types (ggml.h); gaps are types that were removed.
GGML_TYPE_NAMES = {
    0: "F32",
    1: "F16",
    2: "Q4_0",
    3: "Q4_1",
    6: "Q5_0",
    7: "Q5_1",
    8: "Q8_0",
    9: "Q8_1",
    10: "Q2_K",
    11: "Q3_K",
    12: "Q4_K",
    13: "Q5_K",
    14: "Q6_K",
    15: "Q8_K",
    16: "IQ2_XXS",
    17: "IQ2_XS",
    18: "IQ3_XXS",
    19: "IQ1_S",
    20: "IQ4_NL",
    21: "IQ3_S",
    22: "IQ2_S",
    23: "IQ4_XS",
    24: "I8",
    25: "I16",
    26: "I32",
    27: "I64",
    28: "F64",
    29: "IQ1_M",
    30: "BF16",
    34: "TQ1_0",
    35: "TQ2_0",
    39: "MXFP4",
}

# llama_ftype values stored in general.file_type (llama.h).
FILE_TYPE_NAMES = {
    0: "F32",
    1: "F16",
    2: "Q4_0",
    3: "Q4_1",
    7: "Q8_0",
    8: "Q5_0",
    9: "Q5_1",
    10: "Q2_K",
    11: "Q3_K_S",
    12: "Q3_K_M",
    13: "Q3_K_L",
    14: "Q4_K_S",
    15: "Q4_K_M",
    16: "Q5_K_S",
    17: "Q5_K_M",
    18: "Q6_K",
    19: "IQ2_XXS",
    20: "IQ2_XS",
    21: "Q2_K_S",
    22: "IQ3_XS",
    23: "IQ3_XXS",
    24: "IQ1_S",
    25: "IQ4_NL",
    26: "IQ3_S",
    27: "IQ3_M",
    28: "IQ2_S",
    29: "IQ2_M",
    30: "IQ4_XS",
    31: "IQ1_M",
    32: "BF16",
    36: "TQ1_0",
    37: "TQ2_0",
    38: "MXFP4_MOE",
}
_FILE_TYPE_GUESSED = 1024

# Architectures that only produce embeddings (no causal LM head).
EMBEDDING_ARCHITECTURES = frozenset(
    {
        "bert",
        "modern-bert",
        "nomic-bert",
        "nomic-bert-moe",
        "neo-bert",
        "jina-bert-v2",
        "jina-bert-v3",
        "t5encoder",
        "gemma-embedding",
    }
)
_POOLING_NONE, _POOLING_RANK = 0, 4


class _Cursor:
    """Sequential little-endian reads through a buffer refilled in 1 MiB chunks (few syscalls)."""

    def __init__(self, f: BinaryIO, path: Path, size: int, offset: int = 0) -> None:
        self._f = f
        self._path = path
        self._size = size
        self._buf = b""
        self._base = offset  # file offset of _buf[0]
        self._pos = 0
        f.seek(offset)

    def tell(self) -> int:
        return self._base + self._pos

    def _truncated(self, n: int) -> ModelLoadError:
        return ModelLoadError(
            f"{self._path}: truncated or corrupt GGUF file (needed {n} bytes at offset "
            f"{self.tell()}, but the file is {self._size} bytes)"
        )

    def _fill(self, n: int) -> None:
        """Make sure n bytes are buffered at the cursor."""
        if self.tell() + n > self._size:
            raise self._truncated(n)
        rest = self._buf[self._pos :]
        self._base += self._pos
        self._pos = 0
        self._f.seek(self._base + len(rest))
        self._buf = rest + self._f.read(max(n - len(rest), _CHUNK))
        if len(self._buf) < n:
            raise self._truncated(n)

    def unpack(self, st: struct.Struct) -> tuple[Any, ...]:
        if self._pos + st.size > len(self._buf):
            self._fill(st.size)
        values = st.unpack_from(self._buf, self._pos)
        self._pos += st.size
        return values

    def u32(self) -> int:
        return self.unpack(_U32)[0]

    def u64(self) -> int:
        return self.unpack(_U64)[0]

    def take(self, n: int) -> bytes:
        if self._pos + n > len(self._buf):
            self._fill(n)
        data = self._buf[self._pos : self._pos + n]
        self._pos += n
        return data

    def skip(self, n: int) -> None:
        if self.tell() + n > self._size:
            raise self._truncated(n)
        if self._pos + n <= len(self._buf):
            self._pos += n
        else:  # jump past the buffer without reading what lies between
            self._base = self.tell() + n
            self._buf = b""
            self._pos = 0

    def string(self) -> str:
        return self.take(self.u64()).decode("utf-8", errors="replace")

    def skip_strings(self, count: int) -> None:
        """Skip `count` length-prefixed strings; the hot loop for lazy vocabularies."""
        unpack = _U64.unpack_from
        while count:
            buf, pos, end = self._buf, self._pos, len(self._buf)
            while count and pos + 8 <= end:
                stop = pos + 8 + unpack(buf, pos)[0]
                if stop > end:
                    break
                pos = stop
                count -= 1
            self._pos = pos
            if count:  # the next string straddles the buffer end: refill around it
                self.skip(self.u64())
                count -= 1

    def check_count(self, count: int, item_type: int, what: str) -> None:
        """Reject counts that cannot fit in the rest of the file (corrupt header)."""
        if count * _MIN_ITEM_SIZE.get(item_type, 1) > self._size - self.tell():
            raise ModelLoadError(
                f"{self._path}: corrupt GGUF file ({what} claims {count} items at offset "
                f"{self.tell()}, more than the file can hold)"
            )


def _check_value_type(cur: _Cursor, path: Path, value_type: int, key: str) -> None:
    if value_type not in VALUE_TYPE_NAMES:
        raise ModelLoadError(
            f"{path}: corrupt GGUF file (unknown value type {value_type} for key {key!r} "
            f"near offset {cur.tell()})"
        )


def _read_items(cur: _Cursor, path: Path, item_type: int, count: int, key: str) -> list[Any]:
    """Read `count` items of one type (the body of an array), materializing them all."""
    _check_value_type(cur, path, item_type, key)
    cur.check_count(count, item_type, f"array {key!r}")
    fmt = _SCALAR_FORMATS.get(item_type)
    if fmt is not None:
        size = _SCALAR_STRUCTS[item_type].size * count
        return list(struct.unpack(f"<{count}{fmt}", cur.take(size)))
    if item_type == STRING:
        return [cur.string() for _ in range(count)]
    return [_read_items(cur, path, cur.u32(), cur.u64(), key) for _ in range(count)]


def _skip_items(cur: _Cursor, path: Path, item_type: int, count: int, key: str) -> None:
    _check_value_type(cur, path, item_type, key)
    cur.check_count(count, item_type, f"array {key!r}")
    st = _SCALAR_STRUCTS.get(item_type)
    if st is not None:
        cur.skip(st.size * count)
    elif item_type == STRING:
        cur.skip_strings(count)
    else:
        for _ in range(count):
            _skip_items(cur, path, cur.u32(), cur.u64(), key)


class GGUFArray(Sequence[Any]):
    """A large metadata array left on disk until first use, so that a 150k-token vocabulary
    costs nothing when all you wanted was the architecture. Behaves as a read-only list."""

    def __init__(self, path: Path, offset: int, item_type: int, count: int, key: str) -> None:
        self.path = path
        self.offset = offset  # file offset of the first item
        self.item_type = item_type
        self.n_items = count
        self.key = key
        self._items: list[Any] | None = None

    @property
    def item_type_name(self) -> str:
        return VALUE_TYPE_NAMES[self.item_type]

    @property
    def loaded(self) -> bool:
        return self._items is not None

    def load(self) -> list[Any]:
        """Read the items from the file (once) and return them."""
        if self._items is None:
            try:
                with open(self.path, "rb") as f:
                    size = os.fstat(f.fileno()).st_size
                    cur = _Cursor(f, self.path, size, self.offset)
                    self._items = _read_items(
                        cur, self.path, self.item_type, self.n_items, self.key
                    )
            except OSError as e:
                raise ModelLoadError(f"cannot read {self.key!r} from {self.path}: {e}") from e
        return self._items

    def __len__(self) -> int:
        return self.n_items

    def __getitem__(self, index: Any) -> Any:
        return self.load()[index]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.load())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (GGUFArray, list, tuple)):
            return len(self) == len(other) and list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable-list semantics

    def __repr__(self) -> str:
        state = "loaded" if self.loaded else "not loaded"
        return f"<GGUFArray {self.key!r} {self.item_type_name}[{self.n_items}] {state}>"


@dataclass(frozen=True)
class TensorInfo:
    """One entry of the tensor table; `offset` is relative to the start of the data section."""

    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int

    @property
    def type_name(self) -> str:
        return GGML_TYPE_NAMES.get(self.ggml_type, f"type{self.ggml_type}")

    @property
    def n_elements(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class GGUFInfo:
    """What a GGUF file says about itself. Big arrays in `metadata` are lazy `GGUFArray`s."""

    path: Path
    size_bytes: int
    version: int
    metadata: dict[str, Any] = field(repr=False)
    tensors: tuple[TensorInfo, ...] = field(repr=False)
    data_offset: int
    model_type: str  # general.type: "model", "mmproj", "adapter", ...
    architecture: str | None
    name: str | None
    context_length: int | None
    chat_template: str | None = field(repr=False)
    file_type: int | None
    capabilities: tuple[str, ...]

    def get(self, key: str, default: Any = None) -> Any:
        return self.metadata.get(key, default)

    @property
    def file_type_name(self) -> str | None:
        """The quantization label (e.g. "Q4_K_M") for general.file_type."""
        if self.file_type is None:
            return None
        base = self.file_type & ~_FILE_TYPE_GUESSED
        return FILE_TYPE_NAMES.get(base, f"ftype{base}")

    @property
    def tensor_count(self) -> int:
        return len(self.tensors)

    @property
    def n_params(self) -> int:
        return sum(t.n_elements for t in self.tensors)

    @property
    def chat_templates(self) -> dict[str, str]:
        """Named templates (tokenizer.chat_template.<name>, e.g. "tool_use")."""
        prefix = "tokenizer.chat_template."
        return {
            k[len(prefix) :]: v
            for k, v in self.metadata.items()
            if k.startswith(prefix) and isinstance(v, str)
        }


def _detect_capabilities(
    meta: dict[str, Any], arch: str | None, model_type: str, n_tensors: int
) -> tuple[str, ...]:
    """What the file can be used for: "chat" (causal LM), "embed", "rerank", "see" / "hear"
    (vision / audio projector), "decide" (a decision head)."""
    caps: list[str] = []
    is_projector = model_type == "mmproj" or arch == "clip"
    if is_projector:
        for cap, flag, prefix in (
            ("see", "clip.has_vision_encoder", "clip.vision."),
            ("hear", "clip.has_audio_encoder", "clip.audio."),
        ):
            has = meta.get(flag)
            if has is None:
                has = any(k.startswith(prefix) for k in meta)
            if has:
                caps.append(cap)
    elif model_type == "model" and n_tensors > 0:  # vocab-only files can do nothing
        pooling = meta.get(f"{arch}.pooling_type")
        causal = meta.get(f"{arch}.attention.causal", True)
        if pooling == _POOLING_RANK:
            caps.append("rerank")
        elif (
            arch in EMBEDDING_ARCHITECTURES
            or (pooling is not None and pooling != _POOLING_NONE)
            or causal is False
        ):
            caps.append("embed")
        else:
            caps.append("chat")
    if has_decision_type(meta, arch):
        # as the loaded model reports it (Model.info): llamactl serves a decision model's
        # decisions and refuses to generate with it
        caps = [c for c in caps if c != "chat"] + ["decide"]
    return tuple(caps)


def _open(path: Path) -> BinaryIO:
    try:
        return open(path, "rb")
    except FileNotFoundError as e:
        raise ModelNotFoundError(f"{path}: no such file") from e
    except IsADirectoryError as e:
        raise ModelLoadError(f"{path} is a directory, not a GGUF file") from e
    except OSError as e:
        raise ModelLoadError(f"cannot read {path}: {e.strerror or e}") from e


def _not_gguf(path: Path, head: bytes) -> ModelLoadError:
    """Name the file and, when we can tell, what it is instead."""
    if len(head) < 4:
        return ModelLoadError(f"{path} is not a GGUF file (only {len(head)} bytes long)")
    if head.startswith(b"version https://git-lfs"):
        hint = "it is a Git LFS pointer; fetch the real file with `git lfs pull`"
    elif head.lstrip()[:1] == b"<":
        hint = "it looks like an HTML page, perhaps a failed download"
    elif len(head) >= 10 and head[8:10] == b'{"':
        hint = "it looks like a safetensors file; convert it to GGUF first"
    else:
        hint = f"it starts with {head[:4]!r}, expected {GGUF_MAGIC!r}"
    return ModelLoadError(f"{path} is not a GGUF file ({hint})")


def _check_version(path: Path, version: int) -> None:
    if version in SUPPORTED_VERSIONS:
        return
    if version == 1:
        raise ModelLoadError(f"{path}: GGUF version 1 is not supported; re-convert the model")
    swapped = int.from_bytes(version.to_bytes(4, "little"), "big")
    if swapped in (1, 2, 3):
        raise ModelLoadError(f"{path}: big-endian GGUF files are not supported")
    raise ModelLoadError(f"{path}: unsupported GGUF version {version}")


def read_gguf_info(path: str | os.PathLike[str], *, lazy_min: int = LAZY_ARRAY_MIN) -> GGUFInfo:
    """Parse the header, metadata and tensor table of the GGUF file at `path`.

    Arrays with more than `lazy_min` items are returned as lazy `GGUFArray`s. Raises
    ModelNotFoundError if the file does not exist and ModelLoadError if it is not a readable
    GGUF v2/v3 file; either message names the file.
    """
    path = Path(path)
    with _open(path) as f:
        try:
            size = os.fstat(f.fileno()).st_size
            head = f.read(32)
            if head[:4] != GGUF_MAGIC:
                raise _not_gguf(path, head)
            cur = _Cursor(f, path, size, 4)
            version = cur.u32()
            _check_version(path, version)
            n_tensors = cur.u64()
            n_kv = cur.u64()
            cur.check_count(n_kv, UINT32, "the metadata table")
            cur.check_count(n_tensors, UINT64, "the tensor table")
            metadata = _read_metadata(cur, path, n_kv, lazy_min)
            tensors = tuple(_read_tensor_info(cur) for _ in range(n_tensors))
        except OSError as e:
            raise ModelLoadError(f"cannot read {path}: {e.strerror or e}") from e
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise ModelLoadError(f"{path}: invalid general.alignment {alignment!r}")
    data_offset = -(-cur.tell() // alignment) * alignment
    return _build_info(path, size, version, metadata, tensors, data_offset)


def _read_metadata(cur: _Cursor, path: Path, n_kv: int, lazy_min: int) -> dict[str, Any]:
    metadata: dict[str, Any] = {}
    for _ in range(n_kv):
        key = cur.string()
        value_type = cur.u32()
        _check_value_type(cur, path, value_type, key)
        if value_type == ARRAY:
            item_type, count = cur.u32(), cur.u64()
            if count > lazy_min:
                start = cur.tell()
                _skip_items(cur, path, item_type, count, key)
                metadata[key] = GGUFArray(path, start, item_type, count, key)
            else:
                metadata[key] = _read_items(cur, path, item_type, count, key)
        elif value_type == STRING:
            metadata[key] = cur.string()
        else:
            metadata[key] = cur.unpack(_SCALAR_STRUCTS[value_type])[0]
    return metadata


def _read_tensor_info(cur: _Cursor) -> TensorInfo:
    name = cur.string()
    n_dims = cur.u32()
    cur.check_count(n_dims, UINT64, f"tensor {name!r} shape")
    shape = tuple(cur.u64() for _ in range(n_dims))
    ggml_type = cur.u32()
    offset = cur.u64()
    return TensorInfo(name=name, shape=shape, ggml_type=ggml_type, offset=offset)


def _build_info(
    path: Path,
    size: int,
    version: int,
    metadata: dict[str, Any],
    tensors: tuple[TensorInfo, ...],
    data_offset: int,
) -> GGUFInfo:
    """Pull the well-known keys out of the metadata, ignoring values of the wrong type."""

    def typed(key: str, kind: type) -> Any:
        value = metadata.get(key)
        if kind is int and isinstance(value, bool):
            return None
        return value if isinstance(value, kind) else None

    arch = typed("general.architecture", str)
    model_type = typed("general.type", str) or "model"
    return GGUFInfo(
        path=path,
        size_bytes=size,
        version=version,
        metadata=metadata,
        tensors=tensors,
        data_offset=data_offset,
        model_type=model_type,
        architecture=arch,
        name=typed("general.name", str),
        context_length=typed(f"{arch}.context_length", int) if arch else None,
        chat_template=typed("tokenizer.chat_template", str),
        file_type=typed("general.file_type", int),
        capabilities=_detect_capabilities(metadata, arch, model_type, len(tensors)),
    )
