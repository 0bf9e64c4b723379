"""A reusable `llama_batch` filled token by token from Python."""

from __future__ import annotations

import llama_cpp

from llamactl.core.errors import LlamactlError


class Batch:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._batch: llama_cpp.llama_batch | None = llama_cpp.llama_batch_init(capacity, 0, 1)
        self.n_tokens = 0
        # each row's sequence and position, readable without going through ctypes
        self.seq_ids: list[int] = []
        self.positions: list[int] = []

    @property
    def raw(self) -> llama_cpp.llama_batch:
        b = self._live()
        b.n_tokens = self.n_tokens
        return b

    @property
    def free_rows(self) -> int:
        return self.capacity - self.n_tokens

    def clear(self) -> None:
        self.n_tokens = 0
        self.seq_ids.clear()
        self.positions.clear()

    def add(self, token: int, pos: int, seq_id: int, logits: bool) -> int:
        """Append one token; return its row (the index to sample its logits from)."""
        i = self.n_tokens
        if i >= self.capacity:  # llama_decode would abort the process: refuse here
            raise OverflowError("batch is full")
        b = self._live()
        b.token[i] = token
        b.pos[i] = pos
        b.n_seq_id[i] = 1
        b.seq_id[i][0] = seq_id
        b.logits[i] = logits
        self.n_tokens = i + 1
        self.seq_ids.append(seq_id)
        self.positions.append(pos)
        return i

    def _live(self) -> llama_cpp.llama_batch:
        if self._batch is None:
            raise LlamactlError("the batch was freed")
        return self._batch

    def free(self) -> None:
        if self._batch is not None:
            llama_cpp.llama_batch_free(self._batch)
            self._batch = None

    def __del__(self) -> None:
        self.free()
