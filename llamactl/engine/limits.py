"""Numbers the engine's design fixes, importable without loading llama.cpp.

The settings model takes its bounds and its help texts from here, so `--help` stays fast and
each bound is written once: the engine checks its own config against the same constants.
"""

from __future__ import annotations

from llamactl.core.cpu import physical_cores

__all__ = ["DEFAULT_SLOT_CTX", "MAX_DRAFT", "physical_cores"]

DEFAULT_SLOT_CTX = 4096  # KV positions per slot when n_ctx is not given (capped by training)
MAX_DRAFT = 48  # a draft and its pending row stay under 64 rows (one flash-attention kernel)
