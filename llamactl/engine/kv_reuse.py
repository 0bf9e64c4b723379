"""What each slot's KV holds and how a new prompt reuses it: the longest shared prefix of a
free slot, states saved to and restored from the RAM prompt cache, and checkpoints for models
whose memory cannot be cut anywhere (recurrent and hybrid layers, and a sliding window whose
older cells are gone, are rolled back to one).

Everything here runs on the decode thread.
"""

from __future__ import annotations

import ctypes
import logging

import llama_cpp

from ._backend import memory_of
from .prompt_cache import CacheEntry, Checkpoint, PromptCache, common_prefix, load_seq, save_seq
from .prompt_chunks import EXACT_PIECE, cut_rows
from .requests import EngineConfig, EngineStats, GenerationRequest
from .slot import Slot
from .speculative import DraftModel

__all__ = ["SlotMemory"]

log = logging.getLogger("llamactl.engine")


class SlotMemory:
    """The KV side of the chat engine's slots (one llama.cpp sequence each)."""

    def __init__(
        self,
        ctx: llama_cpp.llama_context_p,
        config: EngineConfig,
        cache: PromptCache | None,
        *,
        can_trim: bool,
        window: int = 0,
        split_kernels: bool = False,
        stats: EngineStats,
        drafter: DraftModel | None,
    ) -> None:
        self._ctx = ctx
        self._mem = memory_of(ctx)
        self.config = config
        self.cache = cache
        self._can_trim = can_trim
        self._window = window
        # over a cache whose kernels depend on a chunk's rows, a checkpoint never cuts a chunk
        # below the tiled kernel's rows: the prompt takes the kernels of a cold run
        self._min_chunk = EXACT_PIECE if split_kernels else 1
        self.stats = stats
        self.drafter = drafter  # its sequences follow the target's through the cache
        # --cache-reuse moves KV cells: only where llama.cpp can shift positions
        self.can_shift = bool(llama_cpp.llama_memory_can_shift(self._mem))

    def trim(self, slot: Slot, n: int) -> None:
        """Drop the slot's KV from position `n` on (rejected drafts, companion rows)."""
        llama_cpp.llama_memory_seq_rm(self._mem, slot.seq_id, n, -1)
        slot.tiled_rows = cut_rows(slot.tiled_rows, n)

    def pick(
        self, slots: list[Slot], prompt: list[int], use_cache: bool, wanted: int | None = None
    ) -> tuple[Slot, int]:
        """Slot `wanted` when one is asked for, else the free slot sharing the largest share
        of `prompt` (above the similarity threshold; copied to an empty slot when running
        there would cut it), else the least recently used one."""
        if wanted is not None:
            slot = slots[wanted]
            return slot, common_prefix(slot.kv_tokens, prompt) if use_cache else 0
        free = [s for s in slots if not s.busy]
        best, best_lcp = None, 0
        threshold = self.config.slot_prompt_similarity
        if use_cache and threshold > 0:
            for s in free:
                lcp = common_prefix(s.kv_tokens, prompt)
                if lcp > best_lcp and lcp / len(prompt) > threshold:
                    best, best_lcp = s, lcp
        if best is None:
            best = min(free, key=lambda s: s.last_used)
            best_lcp = common_prefix(best.kv_tokens, prompt) if use_cache else 0
        elif best_lcp < len(best.kv_tokens) and not _cuts_only_answer(best, best_lcp):
            best = self._spare(best, free)
        return best, best_lcp

    def _spare(self, similar: Slot, free: list[Slot]) -> Slot:
        """The slot to run a prompt that shares only part of `similar`'s KV.

        Cutting `similar` down would throw away the rest of another conversation (the prompt
        cache keeps it only when most of it is lost), so while a slot is still empty the KV is
        copied there and `similar` stays whole: a conversation's KV survives as long as there
        is room for it, whatever order concurrent requests arrive in."""
        empty = next((s for s in free if not s.kv_tokens), None)
        if empty is None:
            return similar
        # a state copy, not llama_memory_seq_cp: across KV streams that copy waits for the
        # next decode, and a restore into `similar` before it would reach `empty` too
        state = save_seq(self._ctx, similar.seq_id)
        if state is None or not load_seq(self._ctx, empty.seq_id, state):
            self.clear(empty)
            return similar
        empty.kv_tokens = list(similar.kv_tokens)
        empty.answer_from = similar.answer_from
        empty.checkpoints = list(similar.checkpoints)
        empty.tiled_rows = cut_rows(similar.tiled_rows, len(similar.kv_tokens))
        log.debug("slot %d: took a copy of slot %d's KV, left whole", empty.seq_id, similar.seq_id)
        return empty

    # ------------------------------------------------------------ prompt cache
    def offer(self, slot: Slot, lcp: int, *, idle: bool = False) -> None:
        """Save a finished completion's KV before a new request overwrites it (once).

        With `cache_idle_slots` (the default) whenever a request would cut it: llama-server
        saves every idle slot after each launch, so a conversation whose slot is taken by
        another sharing most of its prefix (a long system prompt) keeps its tail. Without it,
        only the slot a request takes, and only when the request keeps less than half of it
        (llama-server's rule then). Never when a request keeps the whole prompt and cuts only
        the answer after it (the same prompt again, a regenerated answer): saving that costs
        more than the warm request itself (a 1.7k-token state: ~50 ms of a 110 ms TTFT)."""
        if not slot.saveable or not slot.kv_tokens:
            return
        n = len(slot.kv_tokens)
        if lcp >= n:  # the new prompt extends it: nothing is lost
            return
        if not idle and slot.answer_from is not None and lcp >= slot.answer_from:
            return
        if not self.config.cache_idle_slots and (idle or lcp / n >= 0.5):
            return
        slot.saveable = False
        cache = self.cache
        if cache is None or cache.contains(slot.kv_tokens):  # saveable implies a cache
            return
        state = save_seq(self._ctx, slot.seq_id)
        if state is None:
            return
        entry = CacheEntry(list(slot.kv_tokens), state, cache.layout, list(slot.checkpoints))
        entry.tiled_rows = cut_rows(slot.tiled_rows, n)
        drafter = self.drafter
        if drafter is not None and drafter.tokens[slot.seq_id]:
            entry.draft_state = save_seq(drafter.ctx, slot.seq_id)
            if entry.draft_state is not None:
                entry.draft_tokens = list(drafter.tokens[slot.seq_id])
        if cache.add(entry):
            log.debug("prompt cache: saved %d tokens of slot %d", n, slot.seq_id)

    def restore(self, slot: Slot, prompt: list[int], lcp: int) -> int:
        """Load the cached state that serves `prompt` better than the slot's own KV;
        return the new common prefix."""
        cache = self.cache
        if cache is None:
            return lcp
        entry = cache.take(prompt, lcp, len(slot.kv_tokens))
        if entry is None:
            return lcp
        self.clear(slot)
        if not load_seq(self._ctx, slot.seq_id, entry.state):
            log.warning("prompt cache: llama.cpp refused a saved state; decoding instead")
            self.clear(slot)
            return 0
        if not self.holds(slot, len(entry.tokens)):  # an entry read from --cache-persist
            log.warning("prompt cache: a saved state's positions are wrong; dropped, decoding")
            if entry in cache.entries:
                cache.entries.remove(entry)
            self.purge(slot)
            return 0
        slot.kv_tokens = list(entry.tokens)
        slot.checkpoints = list(entry.checkpoints)
        slot.tiled_rows = cut_rows(entry.tiled_rows, len(entry.tokens))
        drafter = self.drafter
        if drafter is not None and entry.draft_state is not None:
            drafter.clear(slot.seq_id)
            if load_seq(drafter.ctx, slot.seq_id, entry.draft_state):
                drafter.tokens[slot.seq_id] = list(entry.draft_tokens)
            else:
                drafter.clear(slot.seq_id)
        lcp = common_prefix(entry.tokens, prompt)
        cache.stats.tokens_restored += lcp
        log.debug("prompt cache: restored %d tokens into slot %d", len(entry.tokens), slot.seq_id)
        return lcp

    # ------------------------------------------------------------ checkpoints
    def checkpoint_positions(self, slot: Slot, req: GenerationRequest, keep: int) -> list[int]:
        """Where to stop prompt chunks and checkpoint: before the last user message, before
        earlier ones `checkpoint_min_step` apart, and 4 tokens before the prompt's end. Over
        split kernels, only where the chunks on both sides keep the tiled kernel's rows (a
        cut that would change a row's kernel is not worth its checkpoint)."""
        n = len(req.prompt)
        step = self.config.checkpoint_min_step
        last = slot.checkpoints[-1].n_tokens if slot.checkpoints else None
        starts = [p for p in req.user_starts if 0 < p < n]
        wanted: list[int] = []
        for p in starts:
            if p <= keep:
                continue
            if p == starts[-1] or last is None or p - last >= step:
                wanted.append(p)
                last = p
        near_end = n - 4
        if near_end > keep and near_end > (wanted[-1] if wanted else 0):
            wanted.append(near_end)
        out: list[int] = []
        stop = keep  # where the chunk before a checkpoint starts
        for p in wanted:
            if self._splits_whole(stop, p, n, req):
                out.append(p)
                stop = p
        return out

    def _splits_whole(self, stop: int, p: int, n: int, req: GenerationRequest) -> bool:
        """Whether a checkpoint at `p` leaves the chunks on both sides (from `stop`, and on to
        the next media start or the prompt's last row) at least `_min_chunk` rows."""
        if self._min_chunk <= 1:
            return True
        media = req.media
        start, end = stop, n - 1
        if media is not None:
            if media.floor(p) != p or media.span_at(p) is not None:
                return False
            start = max([stop, *(s.end for s in media.spans if s.end <= p)])
            end = media.next_start(p) or end
        return p - start >= self._min_chunk and end - p >= self._min_chunk

    def checkpoint(self, slot: Slot) -> None:
        n = len(slot.kv_tokens)
        if any(c.n_tokens == n for c in slot.checkpoints):
            return
        if llama_cpp.llama_memory_seq_pos_min(self._mem, slot.seq_id) < 0:
            return
        data = save_seq(self._ctx, slot.seq_id, partial=True)
        if data is None:
            return
        while len(slot.checkpoints) >= self.config.ctx_checkpoints:
            slot.checkpoints.pop(0)
        slot.checkpoints.append(Checkpoint(n, data))
        self.stats.checkpoints_made += 1

    def reuse_prefix(self, slot: Slot, prompt: list[int], lcp: int, min_chunk: int = 0) -> int:
        """Trim the slot's KV to the shared prefix; return how many prompt tokens it keeps.
        With `min_chunk` > 0 (--cache-reuse, on memory that can shift), cached chunks of at
        least that many tokens past the prefix are shifted into place first (`shift_chunks`).

        At least the last prompt token is always decoded again: its logits are needed.
        """
        if min_chunk > 0 and self._can_trim and self.can_shift:
            lcp = self.shift_chunks(slot, prompt, lcp, min_chunk)
        keep = min(lcp, len(prompt) - 1)
        if keep <= 0:
            self.clear(slot)
            return 0
        if keep < len(slot.kv_tokens):
            if not self.can_cut(slot, keep):  # roll the state back to a checkpoint
                keep = self._rollback(slot, keep)
                if keep == 0:
                    return 0
            elif not llama_cpp.llama_memory_seq_rm(self._mem, slot.seq_id, keep, -1):
                self.clear(slot)
                return 0
            del slot.kv_tokens[keep:]
            slot.tiled_rows = cut_rows(slot.tiled_rows, keep)
        return keep

    def can_cut(self, slot: Slot, keep: int) -> bool:
        """Whether dropping the slot's KV from `keep` on leaves what position `keep` attends
        to. llama.cpp keeps every position of a sequence from its first held one to its last
        and lets a sliding window's cells go oldest first, so the window before `keep` is
        whole while its first position is held (llama-server's rule). A state loaded from
        the prompt cache holds only its last window."""
        if keep >= len(slot.kv_tokens):
            return True
        if not self._can_trim:
            return False
        if self._window <= 0:
            return True
        needed = max(0, keep - self._window + 1)  # the first position `keep` sees
        held = llama_cpp.llama_memory_seq_pos_min(self._mem, slot.seq_id)
        return 0 <= held <= needed

    def shift_chunks(self, slot: Slot, prompt: list[int], n_past: int, min_chunk: int) -> int:
        """llama-server's --cache-reuse: walk the slot's cached tokens past the common prefix;
        each run of at least `min_chunk` tokens that continues the new prompt is moved to its
        place there (`seq_rm` the gap, `seq_add` the run's positions) instead of being decoded
        again. Return the prompt tokens the KV now holds in order. Inexact: the moved keys
        were rotated (RoPE) at their old positions and shifted by llama.cpp, so an answer may
        differ from a cold run's."""
        cached = slot.kv_tokens
        seq = slot.seq_id
        head_c = head_p = n_past
        end_p = len(prompt) - 1  # the last prompt token is decoded again in any case
        while head_c < len(cached) and head_p < end_p:
            n = 0
            while (
                head_c + n < len(cached)
                and head_p + n < end_p
                and cached[head_c + n] == prompt[head_p + n]
            ):
                n += 1
            if n >= min_chunk:
                if head_c > head_p:
                    llama_cpp.llama_memory_seq_rm(self._mem, seq, head_p, head_c)
                    llama_cpp.llama_memory_seq_add(
                        self._mem, seq, head_c, head_c + n, head_p - head_c
                    )
                    cached[head_p : head_p + n] = cached[head_c : head_c + n]
                    slot.tiled_rows = None  # moved rows: which kernel made them, no longer known
                    self.stats.cache_reuse_shifted += n
                head_c += n
                head_p += n
            else:
                head_c += 1
        if head_p > n_past:
            log.debug("cache reuse: slot %d keeps %d tokens (prefix %d)", seq, head_p, n_past)
        return head_p

    def _rollback(self, slot: Slot, keep: int) -> int:
        """Restore the latest checkpoint at or before `keep` and trim the attention KV after
        it; return the tokens kept (0: the slot was cleared)."""
        usable = [c for c in slot.checkpoints if 0 < c.n_tokens <= keep]
        if usable:
            cp = usable[-1]
            if (
                load_seq(self._ctx, slot.seq_id, cp.data, partial=True)
                and llama_cpp.llama_memory_seq_rm(self._mem, slot.seq_id, cp.n_tokens, -1)
                and self.holds(slot, cp.n_tokens)
            ):
                slot.checkpoints = [c for c in slot.checkpoints if c.n_tokens <= cp.n_tokens]
                return cp.n_tokens
        self.clear(slot)
        return 0

    def clear(self, slot: Slot) -> None:
        llama_cpp.llama_memory_seq_rm(self._mem, slot.seq_id, -1, -1)
        if (
            llama_cpp.llama_memory_seq_pos_min(self._mem, slot.seq_id) != -1
            or llama_cpp.llama_memory_seq_pos_max(self._mem, slot.seq_id) != -1
        ):  # cells seq_rm cannot reach (a position < 0 or INT32_MAX) would wedge the slot
            self.purge(slot)
        slot.kv_tokens = []
        slot.answer_from = None
        slot.checkpoints = []
        slot.tiled_rows = []
        slot.saveable = False

    def holds(self, slot: Slot, n_tokens: int) -> bool:
        """Whether the slot's sequence has the positions `n_tokens` tokens take: its last at
        n_tokens - 1 and none below 0 (callers have checked that `n_tokens` fits the slot). A
        state put back from a file (slot restore, --cache-persist) is checked so: llama.cpp
        takes its positions as written, and one out of range fails every later decode."""
        lo = llama_cpp.llama_memory_seq_pos_min(self._mem, slot.seq_id)
        hi = llama_cpp.llama_memory_seq_pos_max(self._mem, slot.seq_id)
        if n_tokens == 0:
            return lo == hi == -1
        return 0 <= lo <= hi == n_tokens - 1

    def purge(self, slot: Slot) -> None:
        """Empty the slot's sequence of every cell, even those `llama_memory_seq_rm` cannot
        reach (it removes positions [0, INT32_MAX), so a cell at INT32_MAX or below 0 stays
        for good): the other sequences' states are copied, the whole memory cleared, and
        the copies put back. Costs a state copy of every busy sequence; only a damaged or
        hostile state file ever needs it."""
        seq = slot.seq_id
        kept: dict[int, ctypes.Array | None] = {}
        for other in range(llama_cpp.llama_n_seq_max(self._ctx)):
            if other != seq and llama_cpp.llama_memory_seq_pos_max(self._mem, other) != -1:
                kept[other] = save_seq(self._ctx, other)
        llama_cpp.llama_memory_clear(self._mem, False)
        for other, state in kept.items():
            if state is None or not load_seq(self._ctx, other, state):
                # its next decode fails (positions no longer follow) and that clears it
                log.error("slot memory: sequence %d could not be put back after a purge", other)
        log.warning("slot %d: its sequence held unreachable positions; memory purged", seq)
        slot.kv_tokens = []
        slot.answer_from = None
        slot.checkpoints = []
        slot.tiled_rows = []
        slot.saveable = False

    def fork(self, parent: Slot, child: Slot, now: float) -> None:
        """Give a child a copy of the parent's decoded prompt (decoded once, shared)."""
        llama_cpp.llama_memory_seq_cp(self._mem, parent.seq_id, child.seq_id, -1, -1)
        child.kv_tokens = list(parent.kv_tokens)
        child.tiled_rows = cut_rows(parent.tiled_rows, len(parent.kv_tokens))
        child.prompt_pos = parent.prompt_pos
        child.t_prompt_done = now
        child.state = "generating"


def _cuts_only_answer(slot: Slot, lcp: int) -> bool:
    """Whether keeping `lcp` tokens of the slot loses no more than its last answer: the same
    prompt again, a regenerated answer. That answer is not worth a state copy (a 1.5k-token
    prompt: ~30 ms of a warm request's time to first token); llama-server cuts it too."""
    return slot.answer_from is not None and lcp >= slot.answer_from
