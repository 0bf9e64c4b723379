"""The caller's side of a generation: a sync and async iterator of events.

The decode thread pushes events; any thread or event loop consumes them. Delivery to an
asyncio consumer goes through `call_soon_threadsafe`, so the decode thread never blocks on
a slow client and the event loop never blocks on the decode thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator

from .types import Done, Event, TextDelta

_ids = itertools.count(1)
_gathering = threading.local()


@contextlib.contextmanager
def deliver_together() -> Iterator[None]:
    """Wake each event loop once for all the events pushed in this block (one decode step),
    or at each `deliver_pending()` inside it.

    Waking a loop is a write to its self-pipe and a GIL hand-over; with 8 streams that was
    8 per step, each taking the GIL from the decode thread in the middle of its sampling.
    """
    _gathering.pending = {}
    try:
        yield
    finally:
        deliver_pending()
        _gathering.pending = None


def deliver_pending() -> None:
    """Wake the consumers of what this thread has pushed so far (before a long decode)."""
    pending: dict[asyncio.AbstractEventLoop, set[asyncio.Event]] | None = getattr(
        _gathering, "pending", None
    )
    if not pending:
        return
    _gathering.pending = {}
    for loop, events in pending.items():
        # a RuntimeError means the consumer's loop is gone: nobody is listening
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(_set_all, events)


def _set_all(events: set[asyncio.Event]) -> None:
    for event in events:
        event.set()


def _wake(loop: asyncio.AbstractEventLoop, event: asyncio.Event) -> None:
    pending = getattr(_gathering, "pending", None)
    if pending is not None:
        pending.setdefault(loop, set()).add(event)
        return
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(event.set)


class GenerationStream:
    """Events of one request (all its choices when n > 1), ending with one `Done` per choice.

    Iterating yields events; an engine error for this request is raised from the iterator.
    """

    def __init__(self, n_choices: int, on_cancel: Callable[[GenerationStream], None]) -> None:
        self.id = next(_ids)
        self.n_choices = n_choices
        self._on_cancel = on_cancel
        self._lock = threading.Lock()
        self._events: deque[Event | BaseException] = deque()
        self._ready = threading.Condition(self._lock)
        self._async_waiter: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None
        self._open_choices = n_choices
        self._closed = False
        self.cancelled = False
        self.has_reasoning = False  # the engine can end this request's reasoning on demand
        # prompt tokens reused from a slot's cache; known once the request is admitted
        self.cached_tokens: int | None = None
        self.admitted = threading.Event()
        self.slot_id: int | None = None  # the slot of its first choice, once admitted
        self.done: list[Done | None] = [None] * n_choices

    # ------------------------------------------------------------- producer
    def _push(self, item: Event | BaseException) -> None:
        with self._lock:
            if self._closed:
                return
            if isinstance(item, Done):
                if self.done[item.index] is not None:
                    return
                self.done[item.index] = item
                self._open_choices -= 1
                if self._open_choices == 0:
                    self._closed = True
            elif isinstance(item, BaseException):
                self._closed = True
            self._events.append(item)
            self._ready.notify_all()
            waiter = self._async_waiter
        if waiter is not None:
            _wake(*waiter)

    @property
    def finished(self) -> bool:
        with self._lock:
            return self._closed

    # ------------------------------------------------------------- consumer
    def cancel(self) -> None:
        """Stop generating; a `Done(cancelled)` follows for every open choice."""
        if not self.finished and not self.cancelled:
            self.cancelled = True
            self._on_cancel(self)

    def _pop(self) -> Event | BaseException | None:
        if self._events:
            return self._events.popleft()
        return None

    def __iter__(self) -> Iterator[Event]:
        while True:
            with self._lock:
                while not self._events:
                    if self._closed:
                        return
                    self._ready.wait()
                item = self._events.popleft()
            if isinstance(item, BaseException):
                raise item
            yield item

    async def __aiter__(self) -> AsyncIterator[Event]:
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()
        with self._lock:
            self._async_waiter = (loop, wake)
        try:
            while True:
                with self._lock:
                    item = self._pop()
                    closed = self._closed
                    if item is None:
                        wake.clear()
                if item is None:
                    if closed:
                        return
                    await wake.wait()
                    continue
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            with self._lock:
                self._async_waiter = None

    def collect(self) -> tuple[list[str], list[Done]]:
        """Run to the end; return each choice's full text and its `Done`."""
        texts = [""] * self.n_choices
        for event in self:
            if isinstance(event, TextDelta):
                texts[event.index] += event.text
        return texts, [d for d in self.done if d is not None]
