"""Numbers the engine's design fixes, importable without loading llama.cpp.

The settings model takes its bounds and its help texts from here, so `--help` stays fast and
each bound is written once: the engine checks its own config against the same constants.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

__all__ = ["DEFAULT_SLOT_CTX", "MAX_DRAFT", "physical_cores"]

DEFAULT_SLOT_CTX = 4096  # KV positions per slot when n_ctx is not given (capped by training)
MAX_DRAFT = 48  # a draft and its pending row stay under 64 rows (one flash-attention kernel)


@functools.cache
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
