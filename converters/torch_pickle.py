"""Reading a small `torch.save` file (kev's `head.pt`) without torch.

A torch file is a zip holding `<root>/data.pkl` and one raw buffer per storage under
`<root>/data/<key>`. The pickle is read with an allow-list of the few globals a saved state dict
uses (tensor rebuild, storage types, OrderedDict); anything else is refused, so loading cannot
run code, like `torch.load(weights_only=True)`. Tensors come back as numpy arrays.
"""

from __future__ import annotations

import collections
import io
import pickle
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from llamactl.core.errors import CheckpointError

_STORAGE_DTYPES = {
    "FloatStorage": np.dtype("<f4"),
    "DoubleStorage": np.dtype("<f8"),
    "HalfStorage": np.dtype("<f2"),
    "BFloat16Storage": np.dtype("<u2"),
    "LongStorage": np.dtype("<i8"),
    "IntStorage": np.dtype("<i4"),
    "ShortStorage": np.dtype("<i2"),
    "CharStorage": np.dtype("i1"),
    "ByteStorage": np.dtype("u1"),
    "BoolStorage": np.dtype("?"),
}


class _StorageType:
    def __init__(self, name: str) -> None:
        self.name = name
        self.dtype = _STORAGE_DTYPES[name]


def _rebuild_tensor(
    storage: np.ndarray, offset: int, size: tuple[int, ...], stride: tuple[int, ...], *_: Any
) -> np.ndarray:
    item = storage.itemsize
    view = np.lib.stride_tricks.as_strided(
        storage[offset:], shape=tuple(size), strides=tuple(s * item for s in stride)
    )
    return np.array(view)


def _rebuild_parameter(data: np.ndarray, *_: Any) -> np.ndarray:
    return data


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, archive: zipfile.ZipFile, root: str, path: Path) -> None:
        super().__init__(file)
        self.archive, self.root, self.path = archive, root, path

    def find_class(self, module: str, name: str) -> Any:
        if module == "torch._utils" and name == "_rebuild_tensor_v2":
            return _rebuild_tensor
        if module == "torch._utils" and name == "_rebuild_parameter":
            return _rebuild_parameter
        if module == "torch" and name in _STORAGE_DTYPES:
            return _StorageType(name)
        if module == "collections" and name == "OrderedDict":
            return collections.OrderedDict
        raise CheckpointError(
            self.path, None, f"refusing to load {module}.{name}: not a plain tensor state dict"
        )

    def persistent_load(self, pid: Any) -> np.ndarray:
        if not (isinstance(pid, tuple) and pid and pid[0] == "storage"):
            raise CheckpointError(self.path, None, f"unsupported storage reference {pid!r}")
        storage_type, key = pid[1], str(pid[2])
        raw = self.archive.read(f"{self.root}/data/{key}")
        arr = np.frombuffer(raw, dtype=storage_type.dtype)
        if storage_type.name == "BFloat16Storage":
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        return arr


def load(path: Path) -> Any:
    """The object a `torch.save` file holds, with tensors as numpy arrays."""
    try:
        with zipfile.ZipFile(path) as archive:
            pkl = next((n for n in archive.namelist() if n.endswith("/data.pkl")), None)
            if pkl is None:
                raise CheckpointError(path, None, "not a torch zip file (no data.pkl)")
            root = pkl[: -len("/data.pkl")]
            return _Unpickler(io.BytesIO(archive.read(pkl)), archive, root, path).load()
    except (zipfile.BadZipFile, OSError, pickle.UnpicklingError, EOFError) as exc:
        raise CheckpointError(path, None, f"cannot read the torch file ({exc})") from None
