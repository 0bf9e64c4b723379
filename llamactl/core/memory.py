"""Memory facts: what this machine has free now (what a default context may plan to take) and
what a process holds (`llamactl ps`)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["available_memory", "resident_bytes"]


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


def resident_bytes(pid: int) -> int | None:
    """Resident memory of process `pid` (Linux /proc VmRSS), None where unknown."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
