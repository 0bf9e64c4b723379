"""A slot's KV taken out and put back: slot files (`/slots/{id}?action=save|restore|erase`)
and the persistent prompt cache's snapshots.

`SeqStore` runs on the decode thread, between decode steps, on an idle slot. `SlotFiles` is
what callers on other threads use: it sends the KV part to the decode thread (a Future, so an
async caller can await a busy slot without holding a thread) and reads and writes the files
on the caller's thread, never on the decode thread.
"""

from __future__ import annotations

import errno
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import llama_cpp

from llamactl.core.errors import InvalidRequestError, LlamactlError

from .kv_reuse import SlotMemory
from .prompt_cache import load_seq, save_seq
from .slot import Slot
from .state_file import (
    SeqSnapshot,
    StateFileError,
    StateIdentity,
    empty_state,
    read_state_file,
    state_file_size,
    write_state_file,
)

__all__ = ["SeqStore", "SlotFileResult", "SlotFiles"]


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
        if any(not 0 < c.n_tokens <= len(snap.tokens) for c in snap.checkpoints):
            raise InvalidRequestError("Unable to restore slot: invalid checkpoints in the file")

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
        if not memory.holds(slot, len(snap.tokens)):
            memory.purge(slot)
            raise InvalidRequestError(
                f"Unable to restore slot: the saved state's positions are not those of its "
                f"{len(snap.tokens)} tokens (a damaged or altered file); the slot was erased"
            )
        slot.kv_tokens = list(snap.tokens)
        slot.answer_from = None  # a restored file: any cut of it is a loss
        slot.checkpoints = list(snap.checkpoints)
        slot.tiled_rows = None  # not recorded in the file
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


# Runs fn(slot) on the decode thread once slot `id` is idle (None: no slot); the engine's
RunOnSlot = Callable[[int | None, Callable[[Any], Any]], "Future[Any]"]


class SlotFiles:
    """Slot save / restore / erase for callers on any thread.

    The KV side is a Future resolved on the decode thread when the slot is idle; the file
    side runs on the caller's thread. `save`, `restore` and `erase` do both and wait.
    """

    def __init__(self, store: SeqStore, identity: StateIdentity, run: RunOnSlot) -> None:
        self.store = store
        self.identity = identity
        self._run = run

    # ---------------------------------------------------------------- the KV side
    def snapshot(self, slot_id: int) -> Future[SeqSnapshot]:
        """A copy of slot `slot_id`'s KV, once its job (if any) has ended."""
        return self._run(slot_id, self.store.snapshot)

    def install(self, slot_id: int, snap: SeqSnapshot) -> Future[None]:
        """Make slot `slot_id` hold `snap` (as `read` returned it)."""
        self.store.check(snap)
        return self._run(slot_id, lambda slot: self.store.install(slot, snap))

    def erase(self, slot_id: int) -> Future[int]:
        """Empty slot `slot_id`'s KV; the Future gives the tokens it held."""
        return self._run(slot_id, self.store.erase)

    # ---------------------------------------------------------------- the file side
    def planned_size(self, snap: SeqSnapshot) -> int:
        """At most the bytes `write` would write for `snap` (a quota is checked first)."""
        return state_file_size(self.identity, snap, kind="slot")

    def write(self, path: Path, snap: SeqSnapshot) -> int:
        """Write `snap` to `path` atomically; return its bytes."""
        try:
            return write_state_file(path, self.identity, snap, kind="slot")
        except OSError as exc:  # its text names the server's folder: only the reason is told
            reason = exc.strerror or type(exc).__name__
            if exc.errno == errno.ENAMETOOLONG:
                raise InvalidRequestError(
                    f"Unable to save slot: the file name is too long for the slot folder's "
                    f"file system ({reason})"
                ) from None
            if exc.errno in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                # the name is taken by something a save must not replace (a directory)
                raise InvalidRequestError(
                    f"Unable to save slot: the name is taken by a directory ({reason})"
                ) from None
            raise LlamactlError(f"Unable to save slot: {reason}") from None

    def read(self, path: Path) -> tuple[SeqSnapshot, int]:
        """The snapshot in `path` and its bytes; 400 for a missing, foreign or damaged file."""
        try:
            return read_state_file(path, self.identity)
        except FileNotFoundError:
            raise InvalidRequestError(f"Unable to restore slot: no file {path.name}") from None
        except StateFileError as exc:
            raise InvalidRequestError(f"Unable to restore slot: {exc}") from None
        except OSError as exc:  # its text names the server's folder: only the reason is told
            reason = exc.strerror or type(exc).__name__
            raise InvalidRequestError(f"Unable to restore slot: {path.name}: {reason}") from None

    # ---------------------------------------------------------------- both, waiting
    def save(self, slot_id: int, path: Path) -> SlotFileResult:
        t0 = time.perf_counter()
        snap = self.snapshot(slot_id).result()
        n_bytes = self.write(path, snap)
        return SlotFileResult(len(snap.tokens), n_bytes, _ms_since(t0))

    def restore(self, slot_id: int, path: Path) -> SlotFileResult:
        t0 = time.perf_counter()
        snap, n_bytes = self.read(path)
        self.install(slot_id, snap).result()
        return SlotFileResult(len(snap.tokens), n_bytes, _ms_since(t0))


def _ms_since(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000.0
