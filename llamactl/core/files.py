"""Files written whole or not at all (a reader never sees half a WAV or half a saved state),
and files read only when they are what they claim: a regular file of a bounded size.

A path a request or a folder scan names may be a FIFO (opening it blocks until a writer
comes, and a thread blocked in `open` cannot be stopped) or a device that never ends, and a
regular file may be far larger than anything the reader means to hold. `open_regular` opens
without blocking and checks the open file itself (fstat, so no swap between the check and the
read), before any byte is read.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from .errors import FileRefusedError, FileTooLargeError

__all__ = ["atomic_output", "open_regular"]

# Bytes of the final name kept in a temporary file's name: with the prefix and suffix the
# temporary name stays under NAME_MAX (255) whatever the final name's length.
_PART_NAME_BYTES = 200


@contextlib.contextmanager
def atomic_output(path: Path) -> Iterator[BinaryIO]:
    """A binary file that becomes `path` when the block ends without an error (synced, then
    renamed over it); on an error the partial file is removed and `path` is left as it was.
    The file is made beside `path`, with the umask's permissions, as `open` would make it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    stem = os.fsdecode(os.fsencode(path.name)[:_PART_NAME_BYTES])
    part = path.with_name(f".{stem}.{os.getpid()}.{secrets.token_hex(4)}.part")
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


def open_regular(path: str | os.PathLike[str], *, max_bytes: int | None = None) -> BinaryIO:
    """`path` open for binary reading, if it is a regular file of at most `max_bytes`.

    Never blocks: a FIFO or a device is opened non-blocking and refused (FileRefusedError), a
    larger file is refused from its fstat size (FileTooLargeError) before anything is read.
    OSError as `open` raises it otherwise (no such file, permissions)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FileRefusedError("not a regular file")
        if max_bytes is not None and st.st_size > max_bytes:
            raise FileTooLargeError(st.st_size, max_bytes)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
