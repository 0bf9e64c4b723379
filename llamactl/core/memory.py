"""How much memory this machine has free now: what a default context may plan to take."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["available_memory"]


def available_memory() -> int:
    """Bytes the kernel says can be allocated without swapping (MemAvailable), or the
    physical memory where that is not known."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 << 30  # unknown: assume a small machine
