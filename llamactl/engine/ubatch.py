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
    neighbours: int = 1,
) -> list[tuple[int, int]]:
    """Rows (sequence, position) to append so that no row of the batch is computed alone.

    A lone row of sequence s is best joined by a row of the next sequence s + 1 when that one
    has no row in the batch and a shorter KV (its companion
    attends over its own few cells: cheaper than a second row over the lone sequence's many);
    else by a row of s itself, one position past its last. `next_pos(seq)`: the position a
    sequence not in the batch would take next. At most `room` rows are added; the split is
    checked again after each round. With `neighbours` > 1, the sequences beyond the first
    neighbour join too while they are free and shorter: their cheap rows spread the lone
    row's heads better over the threads (see `best_neighbours`).
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
            free = _free_neighbours(seq, pos[row], seqs, n_seqs, next_pos, neighbours)
            if streams and row not in tried_neighbour and free:
                tried_neighbour.add(row)
                free = free[: max(1, room - len(added))]
                for extra in free[1:]:
                    seqs.append(extra)
                    pos.append(next_pos(extra))
                    added.append((extra, next_pos(extra)))
                host, at = free[0], next_pos(free[0])
            seqs.append(host)
            pos.append(at)
            added.append((host, at))
    return added


def _free_neighbours(
    seq: int,
    lone_pos: int,
    seqs: list[int],
    n_seqs: int,
    next_pos: Callable[[int], int],
    most: int,
) -> list[int]:
    """Up to `most` consecutive sequences after `seq` with no row in the batch and fewer
    cells. Only after: llama.cpp's micro-batch starts at the first unplaced row's sequence
    and takes the ids that follow it (companions are appended, after the lone row)."""
    out: list[int] = []
    nb = seq + 1
    while len(out) < most and nb < n_seqs and nb not in seqs and next_pos(nb) < lone_pos:
        out.append(nb)
        nb += 1
    return out


def best_neighbours(n_head: int, n_threads: int, most: int = 3) -> int:
    """How many neighbour companions make a lone long row's attention finish soonest.

    ggml's per-row flash-attention kernel cuts the micro-batch's (stream, head) rows into
    about 4 chunks per thread, handed out in order as threads come free. A lone row's heads
    are all the heavy work (the neighbours attend over a few cells); with one neighbour, 9
    heads on 2 threads make 3 chunks of 3 heads, and one thread does 6 of the 9. More
    neighbours make the chunks smaller. This simulates that hand-out and returns the count,
    from 1 to `most`, with the shortest finish (another row only when it saves 3 %).
    """
    best, best_time = 1, _attention_makespan(n_head, 1, max(1, n_threads))
    for k in range(2, most + 1):
        finish = _attention_makespan(n_head, k, max(1, n_threads))
        if finish < best_time * 0.97:
            best, best_time = k, finish
    return best


def _attention_makespan(n_head: int, neighbours: int, nth: int, light: float = 0.02) -> float:
    """ggml_compute_forward_flash_attn_ext_f16's chunking, with a heavy head costing 1."""
    nr = n_head * (neighbours + 1)
    chunk = -(-nr // (nth * 4))
    nchunk = -(-nr // chunk)
    if nth == 1 or nchunk < nth:
        nchunk = nth
    dr = -(-nr // nchunk)
    free_at = [0.0] * nth
    for c in range(nchunk):
        rows = range(dr * c, min(dr * c + dr, nr))
        cost = sum(1.0 if r < n_head else light for r in rows)
        t = free_at.index(min(free_at))
        free_at[t] += cost
    return max(free_at)


def _view_cells(used: int) -> int:
    return max(KV_PAD, -(-used // KV_PAD) * KV_PAD)
