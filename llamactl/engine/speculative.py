"""Speculators: cheap guesses of a sequence's next tokens, verified by the target model.

The engine puts a sequence's pending token and its draft in the step's batch (next to every
other slot's rows), samples the target at each row in order, and keeps the draft tokens up to
the first one the target would not have produced. The output is what the target alone would
give, whatever the draft; a good draft only saves steps.

Several speculators can be active. For each sequence and round the engine asks each for its
expected accepted tokens (acceptance rate so far times draft length) and lets the best one
draft, instead of llama-server's fixed first-non-empty order.
"""

from __future__ import annotations

import abc
import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import llama_cpp
import numpy as np

from llamactl.core.errors import InvalidRequestError, ModelLoadError

from ._backend import memory_of
from .batch import Batch
from .limits import MAX_DRAFT
from .prompt_cache import common_prefix

if TYPE_CHECKING:
    from .model import Model
    from .requests import EngineConfig

log = logging.getLogger("llamactl.engine")

# also the tie-break order
SPEC_TYPES = ("ngram-simple", "ngram-mod", "ngram-cache", "draft-simple")


@dataclass
class SpecStats:
    """Counters of one speculator (global, or one request's in one slot)."""

    drafts: int = 0  # drafts verified
    drafted: int = 0  # tokens drafted
    accepted_drafts: int = 0  # drafts with at least one token kept
    accepted: int = 0  # tokens kept
    # per draft position: how often it was checked (all before it kept) and kept
    reached: list[int] = field(default_factory=lambda: [0] * MAX_DRAFT)
    kept: list[int] = field(default_factory=lambda: [0] * MAX_DRAFT)

    def add(self, n_drafted: int, n_accepted: int) -> None:
        self.drafts += 1
        self.drafted += n_drafted
        self.accepted += n_accepted
        self.accepted_drafts += n_accepted > 0
        for i in range(min(n_drafted, n_accepted + 1, MAX_DRAFT)):
            self.reached[i] += 1
            self.kept[i] += i < n_accepted


@dataclass
class SeqState:
    """What a speculator remembers about one slot's sequence during one request."""

    stats: dict[str, SpecStats] = field(default_factory=dict)
    ngram_index: dict[int, dict[tuple[int, ...], int]] = field(default_factory=dict)
    indexed: int = 0  # history positions already in ngram_index
    fed: int = 0  # history positions already counted by the n-gram cache
    hashed: int = 0  # history positions whose n-grams are in ngram-mod's table
    poor_drafts: int = 0  # ngram-mod drafts in a row kept under a quarter
    rounds: int = 0  # drafting opportunities so far


class Speculator:
    """One way of guessing the next tokens, with the record of how often it was right."""

    name = ""

    def __init__(self) -> None:
        self.stats = SpecStats()

    def rate(self, seq: SeqState) -> float:
        """Expected share of drafted tokens kept: this request's record, shrunk toward the
        speculator's record over all requests (itself shrunk toward one half)."""
        g = self.stats
        prior = (g.accepted + 1) / (g.drafted + 2)
        own = seq.stats.get(self.name)
        if own is None:
            return prior
        return (own.accepted + 4 * prior) / (own.drafted + 4)

    def survival(self, n: int) -> list[float]:
        """Probability that draft positions 1..n are all kept up to each one: the product of
        each position's keep rate given the ones before were kept (drafts are often all or
        nothing, which a single acceptance rate would miss)."""
        g = self.stats
        out, p, prior = [], 1.0, 0.5
        for i in range(n):
            # a position seldom checked yet borrows the keep rate of the one before it
            keep = (g.kept[i] + 2 * prior) / (g.reached[i] + 2)
            p *= keep
            out.append(p)
            prior = keep
        return out

    def record(self, seq: SeqState, n_drafted: int, n_accepted: int) -> None:
        self.stats.add(n_drafted, n_accepted)
        seq.stats.setdefault(self.name, SpecStats()).add(n_drafted, n_accepted)


class LookupSpeculator(Speculator, abc.ABC):
    """Drafts from the sequence's own tokens, one sequence at a time (the draft model instead
    drafts every slot that chose it in one decode)."""

    # a speculator with its own draft lengths (ngram-mod) uses them instead of
    # spec_draft_n_min / spec_draft_n_max, and drafts all or nothing of at least n_min
    n_min: int | None = None
    n_max: int | None = None

    @abc.abstractmethod
    def draft(self, seq: SeqState, history: list[int], n_max: int) -> list[int]: ...


class NgramSimple(LookupSpeculator):
    """Prompt lookup: find the latest earlier occurrence of the sequence's last few tokens
    (in its prompt or its output) and propose what followed it."""

    name = "ngram-simple"
    sizes = (4, 3)

    def draft(self, seq: SeqState, history: list[int], n_max: int) -> list[int]:
        n = len(history)
        # index every n-gram that ends before the last token (so the suffix finds older ones)
        for size in self.sizes:
            index = seq.ngram_index.setdefault(size, {})
            for end in range(max(seq.indexed, size), n):
                index[tuple(history[end - size : end])] = end
        seq.indexed = n
        for size in self.sizes:
            if n <= size:
                continue
            at = seq.ngram_index[size].get(tuple(history[n - size :]))
            if at is not None and at < n:
                return history[at : at + n_max]
        return []


_HASH_MUL = 6364136223846793005
_MASK64 = (1 << 64) - 1


class NgramMod(LookupSpeculator):
    """llama-server's `ngram-mod`: one hash table shared by every sequence maps the hash of
    the last `n_match` tokens to the token that followed them; a draft follows the table as
    long as it has an answer, and is offered only when it reaches `n_min` tokens. Long
    matches make it the speculator for copying (editing a given text or code block).

    The table is llama.cpp's: 4M entries, an n-gram's hash is its tokens as the digits of a
    base-6364136223846793005 number modulo 2^64 and the table size (so a collision may draft
    another n-gram's follower: the target's verification keeps the output exact). It is
    cleared when a quarter of it is used, and after 5 drafts in a row of one sequence kept
    under a quarter. Unlike llama.cpp, the occupancy is checked before a prompt's n-grams are
    added (llama.cpp adds them and may then clear them all).
    """

    name = "ngram-mod"
    size = 4 * 1024 * 1024

    def __init__(self, n_match: int = 24, n_min: int = 48, n_max: int = 64) -> None:
        super().__init__()
        if n_match < 1:
            raise InvalidRequestError("spec_ngram_mod_n_match must be at least 1")
        self.n_match = n_match
        self.n_max = max(1, min(n_max, MAX_DRAFT))  # a draft and its row stay under 64 rows
        self.n_min = max(1, min(n_min, self.n_max))
        self.table = np.full(self.size, -1, dtype=np.int32)
        self.used = 0
        self._top = pow(_HASH_MUL, n_match - 1, 1 << 64)  # weight of a window's first token

    def reset(self) -> None:
        self.table.fill(-1)
        self.used = 0

    def _hash(self, tokens: list[int]) -> int:
        h = 0
        for t in tokens:
            h = (h * _HASH_MUL + t) & _MASK64
        return h

    def _add(self, seq: SeqState, history: list[int]) -> None:
        """Enter every n-gram of the history not yet entered, with the token after it."""
        n = self.n_match
        start = seq.hashed
        if start == 0 and self.used > self.size // 4:
            self.reset()
        if len(history) <= n or start >= len(history) - n:
            return
        table, size, top = self.table, self.size, self._top
        h = self._hash(history[start : start + n])
        for i in range(start, len(history) - n):
            if i > start:  # roll the window one token on
                h = ((h - history[i - 1] * top) * _HASH_MUL + history[i + n - 1]) & _MASK64
            at = h % size
            if table[at] < 0:
                self.used += 1
            table[at] = history[i + n]
        seq.hashed = len(history) - n

    def draft(self, seq: SeqState, history: list[int], n_max: int) -> list[int]:
        n = self.n_match
        if len(history) < n:
            return []
        self._add(seq, history)
        window = history[-n:]
        h = self._hash(window)
        out: list[int] = []
        table, size, top = self.table, self.size, self._top
        while len(out) < n_max:
            token = int(table[h % size])
            if token < 0:
                break
            out.append(token)
            h = ((h - window[len(out) - 1] * top) * _HASH_MUL + token) & _MASK64
            window.append(token)
        return out if len(out) >= min(self.n_min or 1, n_max) else []

    def record(self, seq: SeqState, n_drafted: int, n_accepted: int) -> None:
        super().record(seq, n_drafted, n_accepted)
        if n_drafted and n_accepted / n_drafted < 0.25:
            seq.poor_drafts += 1
            if seq.poor_drafts >= 5:
                self.reset()
                seq.poor_drafts = 0
                seq.hashed = 0
        else:
            seq.poor_drafts = 0


class NgramCache(LookupSpeculator):
    """Follows n-gram statistics gathered from every sequence: the most frequent next token
    after the last two tokens, while it has been seen often enough."""

    name = "ngram-cache"
    max_contexts = 1_000_000

    def __init__(self, min_hits: int = 2) -> None:
        super().__init__()
        self.min_hits = min_hits
        self.table: dict[tuple[int, int], Counter[int]] = {}

    def _feed(self, seq: SeqState, history: list[int]) -> None:
        if len(self.table) > self.max_contexts:
            self.table.clear()
        for i in range(max(seq.fed, 2), len(history)):
            self.table.setdefault((history[i - 2], history[i - 1]), Counter())[history[i]] += 1
        seq.fed = len(history)

    def draft(self, seq: SeqState, history: list[int], n_max: int) -> list[int]:
        self._feed(seq, history)
        if len(history) < 2:
            return []
        a, b = history[-2], history[-1]
        out: list[int] = []
        while len(out) < n_max:
            counts = self.table.get((a, b))
            if not counts:
                break
            token, hits = counts.most_common(1)[0]
            if hits < self.min_hits or hits * 2 <= sum(counts.values()):
                break
            out.append(token)
            a, b = b, token
        return out


class DraftModel(Speculator):
    """A small model with the target's vocabulary, in its own context with one sequence per
    slot; the drafts of all slots that chose it are decoded together, one token per round."""

    name = "draft-simple"

    def __init__(
        self, model: Model, target: Model, n_parallel: int, n_ctx_slot: int, n_batch: int,
        threads: int, p_min: float,
    ) -> None:  # fmt: skip
        super().__init__()
        if model.n_vocab != target.n_vocab or any(
            model.token_bytes(t) != target.token_bytes(t) for t in range(0, target.n_vocab, 97)
        ):
            raise InvalidRequestError(
                f"the draft model {model.path.name} does not share the vocabulary of "
                f"{target.path.name}"
            )
        self.model = model
        self.owns_model = False  # build_speculators hands it the model it loaded
        self.p_min = p_min
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = n_ctx_slot * n_parallel
        params.n_batch = params.n_ubatch = n_batch
        params.n_seq_max = n_parallel
        params.n_threads = params.n_threads_batch = threads
        params.kv_unified = False
        params.no_perf = True
        ctx = llama_cpp.llama_init_from_model(model.handle, params)
        if not ctx:
            raise ModelLoadError(f"llama.cpp could not create a context for {model.path.name}")
        self.ctx = ctx
        self._open = True
        self.mem = memory_of(ctx)
        self.batch = Batch(n_batch)
        self.tokens: list[list[int]] = [[] for _ in range(n_parallel)]  # what each seq holds

    def close(self) -> None:
        if self._open:
            self._open = False
            self.batch.free()
            llama_cpp.llama_free(self.ctx)
            if self.owns_model:
                self.model.close()

    def clear(self, seq_id: int) -> None:
        llama_cpp.llama_memory_seq_rm(self.mem, seq_id, -1, -1)
        self.tokens[seq_id] = []

    def draft_many(self, jobs: list[tuple[int, list[int], int]]) -> dict[int, list[int]]:
        """Draft for several sequences at once: (seq_id, history, n_max) -> seq_id: draft."""
        rows: dict[int, int] = {}
        pending = {}
        for seq_id, history, _ in jobs:
            held = self.tokens[seq_id]
            keep = min(common_prefix(held, history), len(history) - 1)
            if keep < len(held):
                if not llama_cpp.llama_memory_seq_rm(self.mem, seq_id, keep, -1):
                    self.clear(seq_id)
                    keep = 0
                del self.tokens[seq_id][keep:]
            pending[seq_id] = history[keep:]
        # catch up: decode what each sequence lacks, in batches of at most n_batch rows
        while any(pending.values()):
            self.batch.clear()
            placed: list[tuple[int, int]] = []
            for seq_id, todo in pending.items():
                take = min(len(todo), self.batch.free_rows)
                if take <= 0:
                    continue
                base = len(self.tokens[seq_id])
                for k in range(take):
                    last = k == take - 1 and take == len(todo)
                    row = self.batch.add(todo[k], base + k, seq_id, last)
                    if last:
                        rows[seq_id] = row
                placed.append((seq_id, take))
            if llama_cpp.llama_decode(self.ctx, self.batch.raw) != 0:
                log.warning("draft model decode failed; no draft this round")
                for seq_id, _, _ in jobs:
                    self.clear(seq_id)
                return {}
            for seq_id, take in placed:
                self.tokens[seq_id].extend(pending[seq_id][:take])
                pending[seq_id] = pending[seq_id][take:]
        drafts: dict[int, list[int]] = {seq_id: [] for seq_id, _, _ in jobs}
        live = {seq_id: n_max for seq_id, _, n_max in jobs}
        n_vocab = self.model.n_vocab
        while live:
            self.batch.clear()
            next_rows: dict[int, int] = {}
            for seq_id in list(live):
                logits = np.ctypeslib.as_array(
                    llama_cpp.llama_get_logits_ith(self.ctx, rows[seq_id]), shape=(n_vocab,)
                )
                token = int(np.argmax(logits))
                if self.p_min > 0.0:
                    z = np.exp(logits - logits[token])
                    if 1.0 / float(z.sum()) < self.p_min:
                        del live[seq_id]
                        continue
                drafts[seq_id].append(token)
                if len(drafts[seq_id]) >= live[seq_id]:
                    del live[seq_id]
                    continue
                next_rows[seq_id] = self.batch.add(token, len(self.tokens[seq_id]), seq_id, True)
            if not next_rows:
                break
            if llama_cpp.llama_decode(self.ctx, self.batch.raw) != 0:
                break
            for seq_id in next_rows:
                self.tokens[seq_id].append(drafts[seq_id][-1])
            rows = next_rows
            live = {s: n for s, n in live.items() if s in next_rows}
        return drafts


def build_speculators(
    config: EngineConfig,
    target: Model,
    *,
    can_trim: bool,
    n_ctx_slot: int,
    n_batch: int,
    threads: int,
) -> list[Speculator]:
    """The speculators `config` names, in priority order (none for a model whose memory
    cannot drop a rejected draft); a draft model is loaded here and closed with its
    speculator."""
    types = parse_spec_types(config.spec_types)
    if config.model_draft is not None and not types:
        types = ("draft-simple",)
    if types and not can_trim:
        log.warning(
            "speculative decoding is off: %s cannot drop a rejected draft exactly "
            "(recurrent or hybrid memory; sliding-window attention over an f16 cache)",
            target.path,
        )
        return []
    if not 1 <= config.spec_draft_n_max <= MAX_DRAFT:  # a draft and its row stay under 64
        raise InvalidRequestError(f"spec_draft_n_max must be between 1 and {MAX_DRAFT}")
    out: list[Speculator] = []
    try:
        for name in types:
            if name == "ngram-simple":
                out.append(NgramSimple())
            elif name == "ngram-mod":
                out.append(
                    NgramMod(
                        config.spec_ngram_mod_n_match,
                        config.spec_ngram_mod_n_min,
                        config.spec_ngram_mod_n_max,
                    )
                )
            elif name == "ngram-cache":
                out.append(NgramCache())
            else:
                out.append(_draft_model(config, target, n_ctx_slot, n_batch, threads))
    except BaseException:
        for spec in out:
            if isinstance(spec, DraftModel):
                spec.close()
        raise
    return out


def _draft_model(
    config: EngineConfig, target: Model, n_ctx_slot: int, n_batch: int, threads: int
) -> DraftModel:
    from .model import Model

    if config.model_draft is None:
        raise InvalidRequestError("draft-simple needs a draft model (--model-draft)")
    model = Model(config.model_draft)
    try:
        drafter = DraftModel(
            model, target, config.n_parallel, n_ctx_slot, n_batch, threads,
            config.spec_draft_p_min,
        )  # fmt: skip
    except BaseException:
        model.close()
        raise
    drafter.owns_model = True
    return drafter


def parse_spec_types(types: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """Validated speculator names in priority order ("none" and repeats dropped)."""
    wanted = {t.strip().lower() for t in types if t.strip()} - {"none"}
    unknown = wanted - set(SPEC_TYPES)
    if unknown:
        raise InvalidRequestError(
            f"unknown speculator type(s) {', '.join(sorted(unknown))}; "
            f"known: none, {', '.join(SPEC_TYPES)}"
        )
    return tuple(t for t in SPEC_TYPES if t in wanted)
