"""Files written whole or not at all: a reader never sees half a WAV or half a saved state."""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

__all__ = ["atomic_output"]


@contextlib.contextmanager
def atomic_output(path: Path) -> Iterator[BinaryIO]:
    """A binary file that becomes `path` when the block ends without an error (synced, then
    renamed over it); on an error the partial file is removed and `path` is left as it was.
    The file is made beside `path`, with the umask's permissions, as `open` would make it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.part")
    try:
        with part.open("xb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(part, path)
    except BaseException:
        with contextlib.suppress(OSError):
            part.unlink()
        raise
