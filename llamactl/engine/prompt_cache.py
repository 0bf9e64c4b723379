"""RAM prompt cache: sequence states a later request can restore, keyed by their tokens.

A slot's KV is lost when another request takes the slot. Before that happens the engine
saves the sequence (`llama_state_seq_get_data`) here; a later request whose prompt shares a
long enough prefix with an entry gets that state back (`set_data`) instead of re-decoding it.
Rules follow llama-server (spec §6): prefixes of a new entry are dropped, the oldest entries
are evicted to stay under the byte limit, and an entry is moved (not copied) back into a slot.
"""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass, field

import llama_cpp

from .prompt_chunks import Rows

MIB = 1024 * 1024


@dataclass
class Checkpoint:
    """A partial sequence state (the part of memory that cannot be trimmed: recurrent/SWA)
    taken when the sequence held exactly `n_tokens` tokens."""

    n_tokens: int
    data: ctypes.Array

    @property
    def nbytes(self) -> int:
        return len(self.data)


@dataclass
class CacheEntry:
    tokens: list[int]
    state: ctypes.Array
    layout: tuple
    checkpoints: list[Checkpoint] = field(default_factory=list)
    draft_state: ctypes.Array | None = None  # the draft model's sequence, when there is one
    draft_tokens: list[int] = field(default_factory=list)
    tiled_rows: Rows | None = None  # as Slot.tiled_rows (None: not known)
    created: float = field(default_factory=time.monotonic)

    @property
    def nbytes(self) -> int:
        n = len(self.state) + sum(c.nbytes for c in self.checkpoints)
        return n + (len(self.draft_state) if self.draft_state is not None else 0)


@dataclass
class CacheStats:
    saves: int = 0
    restores: int = 0
    evictions: int = 0
    tokens_restored: int = 0


class PromptCache:
    """Entries in insertion order (oldest first), bounded in bytes; `limit_mib` < 0: no limit.

    Not thread-safe: only the decode thread touches it.
    """

    def __init__(self, limit_mib: int, layout: tuple) -> None:
        self.limit = None if limit_mib < 0 else limit_mib * MIB
        self.layout = layout
        self.entries: list[CacheEntry] = []
        self.stats = CacheStats()

    @property
    def nbytes(self) -> int:
        return sum(e.nbytes for e in self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def contains(self, tokens: list[int]) -> bool:
        """Some entry already holds all of `tokens` (saving them again would add nothing)."""
        return any(common_prefix(e.tokens, tokens) == len(tokens) for e in self.entries)

    def add(self, entry: CacheEntry) -> bool:
        """Store `entry`, dropping its prefixes and the oldest entries until it fits."""
        if self.limit is not None and entry.nbytes > self.limit:
            return False
        self.entries = [
            e
            for e in self.entries
            if common_prefix(e.tokens, entry.tokens) < len(e.tokens) or e.layout != entry.layout
        ]
        if self.limit is not None:
            while self.entries and self.nbytes + entry.nbytes > self.limit:
                self.entries.pop(0)
                self.stats.evictions += 1
        self.entries.append(entry)
        self.stats.saves += 1
        return True

    def take(self, tokens: list[int], current_lcp: int, current_len: int) -> CacheEntry | None:
        """The entry that beats the slot's own KV for `tokens`, if any; removed from the
        cache when `tokens` extend it whole (the slot then holds all of it), kept when they
        cut it (another conversation sharing its system prompt would otherwise take it and
        throw its tail away).

        An entry must keep at least a quarter of itself (`f_keep`) and beat the slot on both
        the share of itself it keeps and the share of the new prompt it covers (`f_sim`).
        """
        best_keep = current_lcp / current_len if current_len else -1.0
        best_sim = current_lcp / len(tokens) if tokens else 0.0
        best: CacheEntry | None = None
        for e in self.entries:
            if e.layout != self.layout or not e.tokens:
                continue
            lcp = common_prefix(e.tokens, tokens)
            f_keep, f_sim = lcp / len(e.tokens), lcp / len(tokens)
            if f_keep < 0.25:
                continue
            if f_keep > best_keep and f_sim > best_sim:
                best, best_keep, best_sim = e, f_keep, f_sim
        if best is not None:
            self.entries.remove(best)
            if common_prefix(best.tokens, tokens) < len(best.tokens):
                self.entries.append(best)  # kept, as the most recently used
            self.stats.restores += 1
        return best


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


# ---------------------------------------------------------------- state I/O
def save_seq(ctx: llama_cpp.llama_context_p, seq_id: int, *, partial: bool = False):
    """The sequence's state as a ctypes buffer, or None when it cannot be read."""
    flags = llama_cpp.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY if partial else 0
    size = llama_cpp.llama_state_seq_get_size_ext(ctx, seq_id, flags)
    if size <= 0:
        return None
    buf = (ctypes.c_uint8 * size)()
    written = llama_cpp.llama_state_seq_get_data_ext(ctx, buf, size, seq_id, flags)
    if written != size:
        return None
    return buf


def load_seq(
    ctx: llama_cpp.llama_context_p, seq_id: int, buf: ctypes.Array, *, partial: bool = False
) -> bool:
    """Write a saved state into `seq_id`; False when llama.cpp refuses it."""
    flags = llama_cpp.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY if partial else 0
    return llama_cpp.llama_state_seq_set_data_ext(ctx, buf, len(buf), seq_id, flags) > 0
