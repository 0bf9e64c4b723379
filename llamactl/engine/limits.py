"""Numbers the engine's design fixes, importable without loading llama.cpp.

The settings model takes its bounds and its help texts from here, so `--help` stays fast and
each bound is written once: the engine checks its own config against the same constants.
"""

from __future__ import annotations

from llamactl.core.cpu import physical_cores

__all__ = ["DEFAULT_SLOT_CTX", "KV_MEMORY_SHARE", "MAX_DRAFT", "physical_cores"]

# When n_ctx is not given a slot gets the model's training context, unless all slots' KV would
# take more than KV_MEMORY_SHARE of the memory available at start; never less than
# DEFAULT_SLOT_CTX positions (or the training context, when that is shorter).
DEFAULT_SLOT_CTX = 4096
KV_MEMORY_SHARE = 0.25
MAX_DRAFT = 48  # a draft and its pending row stay under 64 rows (one flash-attention kernel)
