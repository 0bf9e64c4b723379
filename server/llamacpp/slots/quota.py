"""The slot-save folder's quota: how many bytes and files `POST /slots/{id}?action=save` may
leave in `--slot-save-path`.

Without one, saves under ever new names fill the disk (a full slot of a large context is
hundreds of MB, written in a second). A save is checked before it is written, against what
the folder holds plus the saves being written now (their sizes are known beforehand from
the snapshot), so concurrent saves cannot pass the quota together. A save over an existing
name counts once: the file it replaces is not counted.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from llamactl import QuotaExceededError

__all__ = ["SlotQuota", "SlotQuotaLimits"]

MiB = 1 << 20


@dataclass(frozen=True)
class SlotQuotaLimits:
    """The limits, from --slot-save-quota-mib and --slot-save-max-files."""

    max_bytes: int
    max_files: int


class SlotQuota:
    """The saves being written now (one per server: `ServerState.family_state`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: list[tuple[str, int]] = []  # (name, bytes) of saves being written

    @contextlib.contextmanager
    def reserve(
        self, folder: Path, name: str, size: int, limits: SlotQuotaLimits
    ) -> Iterator[None]:
        """Hold `size` bytes for a save to `folder / name` while the block writes it; a
        QuotaExceededError (400) when the folder would pass a limit."""
        token = (name, size)
        with self._lock:
            self._check(folder, name, size, limits)
            self._pending.append(token)
        try:
            yield
        finally:
            with self._lock:
                self._pending.remove(token)

    def _check(self, folder: Path, name: str, size: int, limits: SlotQuotaLimits) -> None:
        pending = {n: b for n, b in self._pending if n != name}
        on_disk = _sizes(folder)
        on_disk.pop(name, None)  # the file this save replaces
        for n in pending:
            on_disk.pop(n, None)  # being replaced: counted by its reservation
        files = len(on_disk) + len(pending) + 1
        if files > limits.max_files:
            raise QuotaExceededError(
                f"Unable to save slot: the slot folder holds {files - 1} files, the most this "
                f"server keeps is {limits.max_files} (--slot-save-max-files or "
                "LLAMACTL_SLOT_SAVE_MAX_FILES raises it); save over an existing name instead"
            )
        total = sum(on_disk.values()) + sum(pending.values()) + size
        if total > limits.max_bytes:
            raise QuotaExceededError(
                f"Unable to save slot: {size} bytes more would bring the slot folder to "
                f"{total} bytes, over its quota of {limits.max_bytes // MiB} MiB "
                "(--slot-save-quota-mib or LLAMACTL_SLOT_SAVE_QUOTA_MIB raises it)"
            )


def _sizes(folder: Path) -> dict[str, int]:
    """Each entry of `folder` and its size (symlinks not followed), leaving out the
    temporary files of saves being written (their reservations count instead)."""
    out: dict[str, int] = {}
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.name.startswith(".") and entry.name.endswith(".part"):
                    continue
                try:
                    out[entry.name] = entry.stat(follow_symlinks=False).st_size
                except OSError:
                    continue
    except FileNotFoundError:
        pass
    return out
