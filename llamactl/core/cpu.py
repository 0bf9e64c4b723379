"""How many compute threads this machine gives llamactl: the default of every `threads`."""

from __future__ import annotations

import os
from pathlib import Path


def physical_cores() -> int:
    """Cores this process may use, counting hyperthread siblings once (llama.cpp runs best
    with one thread per physical core). Falls back to the logical CPU count."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)
    cores: set[str] = set()
    for cpu in cpus:
        siblings = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
        try:
            cores.add(siblings.read_text().strip())
        except OSError:
            return max(1, len(cpus))
    return max(1, len(cores))


__all__ = ["physical_cores"]
