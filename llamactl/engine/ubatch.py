"""How llama.cpp will cut a batch into micro-batches, and where a row would be computed alone.

ggml's CPU flash attention over an f16 (or f32) cache computes a micro-batch that holds exactly
one row of exactly one sequence, over 512 or more cache cells, with a kernel split over the
keys; every other shape takes the per-row kernel. The two round differently, so with f16 a
sequence's logits would depend on whether its row happened to be alone (a lone client, a gap
between busy slots, the last row of a draft) or in company. The engine keeps f16's speed and
the exactness guarantee by predicting the micro-batches here, from the same rules as
llama.cpp's `llama_batch_allocr` (`split_simple` for one KV stream, `split_equal(sequential)`
for split streams), and giving every lone row a throw-away companion row of its own sequence.

The rules mirror llama.cpp b6xxx-b11434 `src/llama-batch.cpp`; `tests/test_ubatch.py` checks
the prediction against llama.cpp itself (a lone row's logits with and without a companion).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

__all__ = ["LONE_KERNEL_CELLS", "lone_rows", "plan_companions", "split"]

# The split-over-keys kernel is taken from this many cells in the attention view. The view is
# the stream's used cells padded to 256, so it reaches 512 once a sequence passes 256 cells.
LONE_KERNEL_CELLS = 512
KV_PAD = 256


def split(seq_ids: Sequence[int], n_ubatch: int, *, streams: bool) -> list[list[int]]:
    """The rows of each micro-batch llama.cpp makes of a batch whose row i belongs to
    `seq_ids[i]` (one sequence per row). `streams`: split KV streams (not unified)."""
    if streams:
        return _split_equal(seq_ids, n_ubatch)
    rows = list(range(len(seq_ids)))
    return [rows[i : i + n_ubatch] for i in range(0, len(rows), n_ubatch)]


def _split_equal(seq_ids: Sequence[int], n_ubatch: int) -> list[list[int]]:
    by_seq: dict[int, list[int]] = {}
    for row, seq in enumerate(seq_ids):
        by_seq.setdefault(seq, []).append(row)
    used = [False] * len(seq_ids)
    taken = dict.fromkeys(by_seq, 0)  # rows of each sequence already placed
    out: list[list[int]] = []
    while not all(used):
        chain: list[int] = []  # consecutive sequence ids, from the first unused row's
        for row, seq in enumerate(seq_ids):
            if used[row] or seq in chain:
                continue
            if not chain or seq == chain[-1] + 1:
                chain.append(seq)
        per_seq: list[list[int]] = [[] for _ in chain]
        while all(taken[s] < len(by_seq[s]) for s in chain):
            for k, s in enumerate(chain):
                row = by_seq[s][taken[s]]
                per_seq[k].append(row)
                used[row] = True
                taken[s] += 1
            if (len(per_seq[0]) + 1) * len(chain) > n_ubatch:
                break
        out.append([row for rows in per_seq for row in rows])
    return out


def lone_rows(
    seq_ids: Sequence[int], positions: Sequence[int], n_ubatch: int, *, streams: bool
) -> list[int]:
    """Rows that llama.cpp would compute alone (one row of one sequence in a micro-batch)
    over an attention view of LONE_KERNEL_CELLS or more. A sequence's cells are its
    positions (the engine only ever trims a sequence's tail), and the view of a micro-batch
    covers the cells placed so far, the row's own included."""
    lone = []
    for rows in split(seq_ids, n_ubatch, streams=streams):
        if len(rows) == 1 and _view_cells(positions[rows[0]] + 1) >= LONE_KERNEL_CELLS:
            lone.append(rows[0])
    return lone


def plan_companions(
    seq_ids: Sequence[int],
    positions: Sequence[int],
    n_ubatch: int,
    *,
    streams: bool,
    n_seqs: int,
    next_pos: Callable[[int], int],
    room: int,
    spare: int | None = None,
) -> list[tuple[int, int]]:
    """Rows (sequence, position) to append so that no row of the batch is computed alone.

    A lone row of sequence s is best joined by a row of the next sequence s + 1 when that one
    has no row in the batch and a shorter KV (its companion attends over its own few cells:
    cheaper than a second row over the lone sequence's many); else by a row of s itself, one
    position past its last. `next_pos(seq)`: the position a sequence not in the batch would
    take next. `spare`: a sequence that is never a slot's, in the same single KV stream (a
    one-slot engine's): the best host there, as its companion attends over its own cell.
    At most `room` rows are added; the split is checked again after each round.
    One neighbour is the most that pays: measured at 1,700
    cells on SmolLM2 (2 threads), a lone decode takes 17.9 ms alone (the split kernel), 23.9
    with one neighbour, 26.3 with two, 28.7 with a companion of its own sequence.
    """
    seqs, pos = list(seq_ids), list(positions)
    real = len(seqs)
    added: list[tuple[int, int]] = []
    tried_neighbour: set[int] = set()
    for _ in range(4):  # a companion changes the split: look again (twice is the most seen)
        lone = [r for r in lone_rows(seqs, pos, n_ubatch, streams=streams) if r < real]
        if not lone:
            return added
        for row in lone:
            if len(added) >= room:
                return added
            seq = seqs[row]
            host, at = seq, 1 + max(p for s, p in zip(seqs, pos, strict=True) if s == seq)
            neighbour = seq + 1
            if spare is not None and spare not in seqs:
                host, at = spare, next_pos(spare)
            elif streams and row not in tried_neighbour and neighbour < n_seqs:
                tried_neighbour.add(row)
                if neighbour not in seqs and next_pos(neighbour) < pos[row]:
                    host, at = neighbour, next_pos(neighbour)
            seqs.append(host)
            pos.append(at)
            added.append((host, at))
    return added


def _view_cells(used: int) -> int:
    return max(KV_PAD, -(-used // KV_PAD) * KV_PAD)
