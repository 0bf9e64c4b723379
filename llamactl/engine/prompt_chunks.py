"""Where a prompt is cut into decode chunks over an f16 cache, so that a request answers alike
cold and warm.

ggml's CPU flash attention computes a row of a sequence by one kernel when a micro-batch holds
fewer than `EXACT_PIECE` rows of that sequence and by a tiled one from `EXACT_PIECE` rows on;
the two round differently. A row's result does not depend on which other rows share its tiled
chunk, only on the kernel (measured on SmolLM2: rows 236-299 of a 300-row prompt decoded as a
64-row chunk over a cached prefix give the floats of the same rows in a cold 300-row chunk). So
the rule: every text row of a prompt takes the tiled kernel exactly when its text piece (the
text between media, the prompt's last row apart) has `EXACT_PIECE` rows or more, wherever its
cached prefix ended. `chunk_rows` never leaves a tail shorter than that; the engine records
which rows of a slot were tiled (`Slot.tiled_rows`), and `exact_resume` moves a cached
prefix's end back past a few rows made otherwise, and so that what is decoded again is a
tiled chunk too (at most `MAX_REDO` rows decoded again).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .media_prompt import MediaPrompt

__all__ = [
    "EXACT_PIECE",
    "MAX_MISMATCH",
    "MAX_REDO",
    "Rows",
    "add_rows",
    "chunk_rows",
    "cold_tiled",
    "cut_rows",
    "exact_resume",
]

# Rows of one sequence in a ubatch from which ggml's CPU flash attention switches to its tiled
# kernel (measured: 63 rows give the logits of 63 single-row decodes, 64 do not).
EXACT_PIECE = 64
# The most cached rows made otherwise than cold that are decoded again to answer as cold
MAX_MISMATCH = EXACT_PIECE // 4
# so at most this many rows are decoded again for it (~0.06 s on SmolLM2 at 2 threads)
MAX_REDO = MAX_MISMATCH + EXACT_PIECE


def chunk_rows(pos: int, end: int, n_prompt: int, budget: int) -> int:
    """How many rows the chunk from `pos` takes towards `end` (a media start, a checkpoint
    or the prompt's end), at most `budget`. The prompt's last row is left for a chunk of its
    own when the rows before it make a tiled chunk (a warm rerun of the same prompt decodes it
    so); a chunk never leaves fewer than `EXACT_PIECE` rows behind it in its piece."""
    piece = end - pos
    if end == n_prompt and piece >= EXACT_PIECE:
        piece -= 1
    if piece <= budget:
        return piece
    rest = piece - budget
    if rest < EXACT_PIECE and piece - EXACT_PIECE >= EXACT_PIECE:
        return piece - EXACT_PIECE
    return budget


Rows = list[tuple[int, int]]  # disjoint [start, end) ranges, ascending


def add_rows(rows: Rows, start: int, end: int) -> None:
    """Record rows [start, end) (past every recorded one), merged with a range it extends."""
    if rows and rows[-1][1] == start:
        rows[-1] = (rows[-1][0], end)
    else:
        rows.append((start, end))


def cut_rows(rows: Rows | None, n: int) -> Rows | None:
    """The ranges of `rows` below position `n`."""
    if rows is None:
        return None
    return [(a, min(b, n)) for a, b in rows if a < n]


def cold_tiled(n_prompt: int, media: MediaPrompt | None = None) -> Rows:
    """The rows a cold run of the prompt decodes with the tiled kernel: every text piece of
    `EXACT_PIECE` rows or more (the last row apart)."""
    pieces: Rows = []
    start = 0
    for span in media.spans if media is not None else ():
        pieces.append((start, span.start))
        start = span.end
    pieces.append((start, n_prompt - 1))
    return [(a, b) for a, b in pieces if b - a >= EXACT_PIECE]


def _first_difference(mine: Rows, cold: Rows, limit: int) -> int:
    """The first row below `limit` that is tiled in one of the two and not the other."""
    edges = sorted({0, limit, *(x for r in (*mine, *cold) for x in r if x < limit)})

    def inside(rows: Rows, x: int) -> bool:
        return any(a <= x < b for a, b in rows)

    for x in edges:
        if x < limit and inside(mine, x) != inside(cold, x):
            return x
    return limit


def exact_resume(
    keep: int, n_prompt: int, tiled: Rows | None, media: MediaPrompt | None = None
) -> int:
    """Where to go on decoding a prompt whose first `keep` tokens a slot holds, its rows
    computed by the kernels `tiled` says: `keep`, or earlier where that makes every row of the
    prompt take the kernel a cold run gives it: back to the first cached row made otherwise
    when only a few are (at most `MAX_MISMATCH`: a template's header shared with a short
    prompt), and back far enough that what is decoded again is a tiled chunk where a cold run
    tiles it (at most `EXACT_PIECE` rows more). More rows made otherwise (a conversation's
    earlier answers, generated row by row; a state from a file) are kept as they are, with
    the reuse they bring: such a prompt may answer otherwise than cold (docs/engine.md, What
    is not guaranteed)."""
    keep = min(keep, n_prompt - 1)  # the last row is decoded on its own either way
    if tiled is None or keep <= 0:
        return keep
    cold = cold_tiled(n_prompt, media)
    at = _first_difference(tiled, cold, keep)
    if keep - at > MAX_MISMATCH:
        return keep
    for a, b in cold:
        if a <= at < b and b - at < EXACT_PIECE:  # too few rows left for the tiled kernel
            at = max(a, b - EXACT_PIECE)
    return media.floor(at) if media is not None else at
