"""Executors made on first use: importing the server starts no thread or process, and one that
was shut down (or broke) is made again when next needed."""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["LazyExecutor"]

E = TypeVar("E", bound=concurrent.futures.Executor)


class LazyExecutor(Generic[E]):
    def __init__(self, make: Callable[[], E]) -> None:
        self._make = make
        self._executor: E | None = None
        self._lock = threading.Lock()

    def get(self) -> E:
        with self._lock:
            if self._executor is None:
                self._executor = self._make()
            return self._executor

    def shutdown(self) -> None:
        """Stop it without waiting; queued work is dropped."""
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)
