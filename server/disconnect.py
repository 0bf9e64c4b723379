"""Cancelling the work of a client that hung up before its answer was sent.

A streamed answer needs nothing here: Starlette cancels the body iterator when the client
leaves, and `sse_response`'s `on_close` cancels the engine stream. A non-streamed answer has
no body iterator yet, so every route that runs one wraps the run in `cancel_on_disconnect`:
the first `http.disconnect` cancels the generation, which frees its slot within a step. The
router, which relays raw ASGI messages, runs the same `watch_disconnect` on its `receive`.
Work handed to a worker as a `concurrent.futures.Future` that stays cancellable while it runs
(the embedding context's) is awaited with `result_unless_disconnected`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from fastapi import Request

T = TypeVar("T")

# nginx's "client closed request": what the access log shows for an answer nobody was there for
CLIENT_CLOSED_REQUEST = 499


@contextlib.asynccontextmanager
async def cancel_on_disconnect(request: Request, cancel: Callable[[], None]) -> AsyncIterator[None]:
    """Call `cancel` if the client disconnects while the body of the `async with` runs."""
    watcher = asyncio.ensure_future(watch_disconnect(request.receive, cancel))
    try:
        yield
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher


async def watch_disconnect(
    receive: Callable[[], Awaitable[Any]], cancel: Callable[[], None]
) -> None:
    """Wait for `http.disconnect` on `receive` (the body was read already), then `cancel`."""
    while True:
        try:
            message = await receive()
        except Exception:  # a server that cannot say: the generation just runs to its end
            return
        if message["type"] == "http.disconnect":
            cancel()
            return


async def result_unless_disconnected(
    request: Request, future: concurrent.futures.Future[T]
) -> T | None:
    """`future`'s result, or None when the client hung up first: the disconnect cancels
    `future`, and work that checks for that stops (the next request gets the worker)."""
    gone = False

    def hang_up() -> None:
        nonlocal gone
        gone = True
        future.cancel()

    waiter = asyncio.wrap_future(future)
    async with cancel_on_disconnect(request, hang_up):
        try:
            return await waiter
        except asyncio.CancelledError:
            if gone:
                return None  # nobody is there for the answer (or for a cancellation error)
            raise
