"""Cancelling the work of a client that hung up before its answer was sent.

A streamed answer needs nothing here: Starlette cancels the body iterator when the client
leaves, and `sse_response`'s `on_close` cancels the engine stream. A non-streamed answer has
no body iterator yet, so every route that runs one wraps the run in `cancel_on_disconnect`:
the first `http.disconnect` cancels the generation, which frees its slot within a step. The
router, which relays raw ASGI messages, runs the same `watch_disconnect` on its `receive`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import Request


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
