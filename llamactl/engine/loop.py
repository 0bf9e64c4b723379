"""The decode thread both engines run: a queue bounded by `max_queue`, one worker that wakes
when there is work, shutdown, and a failure net so the thread never dies silently.

Only the decode thread touches the llama.cpp context; callers talk to it through the queue
(and, for the chat engine, its command queues), under one condition variable.
"""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod
from collections import deque
from typing import Generic, TypeVar

from llamactl.core.errors import EngineClosedError, QueueFullError

from .cores import CoreShare
from .requests import EngineStats
from .stream import deliver_together

__all__ = ["DecodeLoop"]

log = logging.getLogger("llamactl.engine")

Item = TypeVar("Item")


class DecodeLoop(ABC, Generic[Item]):
    """Subclasses say what work is (`_has_work`), do one round of it (`_tick`) and end every
    open request when a round fails (`_fail_all`); they set `stats` before starting."""

    stats: EngineStats
    cores: CoreShare | None = None  # set by the owner: decode pauses while speech computes

    def _start_loop(self, *, max_queue: int, thread_name: str) -> None:
        self._max_queue = max_queue
        self._queue: deque[Item] = deque()
        self._cv = threading.Condition()
        self._closing = False
        self._draining = False  # a shutdown under way: running requests finish, no new ones
        self._thread = threading.Thread(target=self._run, name=thread_name, daemon=True)
        self._thread.start()

    @property
    def queue_depth(self) -> int:
        return len(self._queue)

    def _enqueue(self, item: Item, *, closed: str) -> None:
        """Queue `item` for the decode thread; refused while closing or when the queue is full."""
        with self._cv:
            if self._closing or self._draining:
                raise EngineClosedError(closed)
            if self._max_queue and len(self._queue) >= self._max_queue:
                raise QueueFullError(
                    f"the server is busy: {len(self._queue)} requests are already waiting"
                )
            self._queue.append(item)
            self.stats.requests_total += 1
            self._cv.notify()

    def _stop_loop(self) -> bool:
        """Stop the decode thread and wait for it; False when it was already stopped."""
        with self._cv:
            if self._closing:
                return False
            self._closing = True
            self._cv.notify()
        self._thread.join()
        return True

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._closing and not self._has_work():
                    self._cv.wait()
                if self._closing:
                    return
                self._take_commands()
            if self.cores is not None:
                self.cores.pause_for_speech()
            try:
                with deliver_together():
                    self._tick()
            except Exception as exc:  # never let the decode thread die silently
                log.exception("decode step failed")
                self._fail_all(exc)

    # ------------------------------------------------------------ for subclasses
    @abstractmethod
    def _has_work(self) -> bool:
        """Called under the lock."""

    def _take_commands(self) -> None:
        """Called under the lock before each round: move commands out of shared queues."""

    @abstractmethod
    def _tick(self) -> None:
        """One round of work on the decode thread."""

    @abstractmethod
    def _fail_all(self, exc: Exception) -> None:
        """End every open request with `exc` (a round raised it)."""
