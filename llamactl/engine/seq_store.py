"""A slot's KV taken out and put back: slot files (`/slots/{id}?action=save|restore|erase`)
and the persistent prompt cache's snapshots.

Everything here runs on the decode thread, between decode steps, on an idle slot; reading and
writing files is the caller's part (the engine does it on the calling thread).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import llama_cpp

from llamactl.core.errors import InvalidRequestError, LlamactlError

from .kv_reuse import SlotMemory
from .prompt_cache import load_seq, save_seq
from .slot import Slot
from .state_file import SeqSnapshot, empty_state

__all__ = ["SeqStore", "SlotFileResult"]


@dataclass(frozen=True)
class SlotFileResult:
    """What a slot save or restore did: tokens, file bytes, milliseconds."""

    n_tokens: int
    n_bytes: int
    ms: float


class SeqStore:
    def __init__(
        self, ctx: llama_cpp.llama_context_p, memory: SlotMemory, *, n_ctx_slot: int, n_vocab: int
    ) -> None:
        self._ctx = ctx
        self.memory = memory
        self.n_ctx_slot = n_ctx_slot
        self.n_vocab = n_vocab

    def snapshot(self, slot: Slot) -> SeqSnapshot:
        """A copy of what the slot's KV holds (an empty slot gives an empty snapshot)."""
        tokens = list(slot.kv_tokens)
        if not tokens:
            return SeqSnapshot([], empty_state())
        state = save_seq(self._ctx, slot.seq_id)
        if state is None:
            raise LlamactlError("Unable to save slot: llama.cpp could not read its state")
        return SeqSnapshot(tokens, state, list(slot.checkpoints))

    def check(self, snap: SeqSnapshot) -> None:
        """Refuse tokens this context cannot hold (the header already matched the model)."""
        if len(snap.tokens) > self.n_ctx_slot:
            raise InvalidRequestError(
                f"Unable to restore slot: {len(snap.tokens)} tokens do not fit the slot's"
                f" context ({self.n_ctx_slot})"
            )
        if any(not 0 <= t < self.n_vocab for t in snap.tokens):
            raise InvalidRequestError("Unable to restore slot: invalid tokens in the file")

    def install(self, slot: Slot, snap: SeqSnapshot) -> None:
        """Replace the slot's KV by `snap`; a refused state leaves the slot empty."""
        memory = self.memory
        if (
            memory.cache is not None
        ):  # what the slot held stays reachable, as when a request takes it
            memory.offer(slot, 0, idle=True)
        self._clear(slot)
        if not snap.tokens:
            return
        if not load_seq(self._ctx, slot.seq_id, snap.state):
            self._clear(slot)
            raise InvalidRequestError(
                "Unable to restore slot: llama.cpp refused the saved state for this context"
            )
        slot.kv_tokens = list(snap.tokens)
        slot.checkpoints = list(snap.checkpoints)
        slot.saveable = memory.cache is not None
        slot.last_used = time.perf_counter()

    def erase(self, slot: Slot) -> int:
        """Empty the slot's KV; return the tokens it held."""
        n = len(slot.kv_tokens)
        self._clear(slot)
        return n

    def _clear(self, slot: Slot) -> None:
        self.memory.clear(slot)
        drafter = self.memory.drafter
        if drafter is not None:  # the draft model's copy follows the slot's
            drafter.clear(slot.seq_id)
