"""Reading a small `torch.save` file (kev's `head.pt`) without torch.

A torch file is a zip holding `<root>/data.pkl` and one raw buffer per storage under
`<root>/data/<key>`. The pickle is read with an allow-list of the few globals a saved state dict
uses (tensor rebuild, storage types, OrderedDict); anything else is refused, so loading cannot
run code, like `torch.load(weights_only=True)`. Tensors come back as numpy arrays.

A tensor is a view (offset, shape, strides) of its storage; every view is checked against the
storage's length before numpy strides over it, since numpy trusts the numbers: a shape larger
than its storage would copy whatever memory follows (or crash the process).
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

_STORAGE_DTYPES: dict[str, np.dtype[Any]] = {
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


_MAX_DIMS = 32  # numpy's own limit is 64; a state dict's tensors have a handful


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _rebuild_parameter(data: np.ndarray, *_: Any) -> np.ndarray:
    return data


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, archive: zipfile.ZipFile, root: str, path: Path) -> None:
        super().__init__(file)
        self.archive, self.root, self.path = archive, root, path

    def find_class(self, module: str, name: str) -> Any:
        if module == "torch._utils" and name == "_rebuild_tensor_v2":
            return self._rebuild_tensor
        if module == "torch._utils" and name == "_rebuild_parameter":
            return _rebuild_parameter
        if module == "torch" and name in _STORAGE_DTYPES:
            return _StorageType(name)
        if module == "collections" and name == "OrderedDict":
            return collections.OrderedDict
        raise CheckpointError(
            self.path, None, f"refusing to load {module}.{name}: not a plain tensor state dict"
        )

    def _rebuild_tensor(
        self, storage: Any, offset: Any, size: Any, stride: Any, *_: Any
    ) -> np.ndarray:
        """The tensor `storage[offset:]` viewed with `size` and `stride` (in elements), as a
        copy, once the view is known to lie inside the storage."""
        shape, strides = self._checked_view(storage, offset, size, stride)
        if 0 in shape:
            return np.zeros(shape, dtype=storage.dtype)
        item = storage.itemsize
        view = np.lib.stride_tricks.as_strided(
            storage[offset:], shape=shape, strides=tuple(s * item for s in strides)
        )
        return np.array(view)

    def _checked_view(
        self, storage: Any, offset: Any, size: Any, stride: Any
    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(shape, strides) when every element the view reaches is inside `storage`, else a
        CheckpointError: the reader's only defence against a file that lies about its sizes."""

        def refuse(problem: str) -> CheckpointError:
            return CheckpointError(
                self.path, None, f"a tensor {problem}: a corrupt or hostile file"
            )

        if not (isinstance(storage, np.ndarray) and storage.ndim == 1):
            raise refuse("is not built on a storage")
        if not (isinstance(size, tuple | list) and isinstance(stride, tuple | list)):
            raise refuse("has no shape or strides")
        if len(size) != len(stride) or len(size) > _MAX_DIMS:
            raise refuse(f"has the shape {size!r} with the strides {stride!r}")
        if not (_is_count(offset) and all(_is_count(n) for n in (*size, *stride))):
            raise refuse(f"has the offset {offset!r}, shape {size!r} or strides {stride!r}")
        shape = tuple(int(n) for n in size)
        # a dimension of one element never steps: its stride may be anything, numpy's may not
        strides = tuple(int(s) if n > 1 else 0 for n, s in zip(shape, stride, strict=True))
        if 0 in shape:
            return shape, strides
        numel = 1
        for n in shape:
            numel *= n
        last = offset + sum((n - 1) * s for n, s in zip(shape, strides, strict=True))
        if last >= len(storage):
            raise refuse(
                f"of shape {shape} (strides {strides}, offset {offset}) reaches element {last} "
                f"of a storage of {len(storage)} elements"
            )
        if numel > len(storage):  # stride-0 broadcasting: a few bytes could ask for gigabytes
            raise refuse(
                f"of shape {shape} has {numel} elements, more than its storage's {len(storage)} "
                "(a broadcast view; save it with .contiguous())"
            )
        return shape, strides

    def persistent_load(self, pid: Any) -> np.ndarray:
        if not (isinstance(pid, tuple) and len(pid) >= 3 and pid[0] == "storage"):
            raise CheckpointError(self.path, None, f"unsupported storage reference {pid!r}")
        storage_type, key = pid[1], str(pid[2])
        if not isinstance(storage_type, _StorageType):
            raise CheckpointError(self.path, None, f"unsupported storage type {storage_type!r}")
        name = f"{self.root}/data/{key}"
        try:
            info = self.archive.getinfo(name)
        except KeyError:
            raise CheckpointError(self.path, None, f"no storage {name} in the zip") from None
        # the zip states each entry's size, and the pickle the storage's element count: they
        # must agree before anything is decompressed (zipfile stops at the stated size, so a
        # compressed bomb cannot expand past what the pickle asked for)
        numel: Any = pid[4] if len(pid) >= 5 else None
        if _is_count(numel) and info.file_size != numel * storage_type.dtype.itemsize:
            raise CheckpointError(
                self.path,
                None,
                f"the storage {name} is {info.file_size} bytes in the zip, but "
                f"{numel} elements of {storage_type.name} in the pickle",
            )
        raw = self.archive.read(info)
        if len(raw) % storage_type.dtype.itemsize:
            raise CheckpointError(
                self.path, None, f"the storage {name} is {len(raw)} bytes: not whole elements"
            )
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
    except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
        # a pickle that calls the allowed globals with the wrong arguments
        raise CheckpointError(path, None, f"not a torch state dict ({exc!r})") from None
