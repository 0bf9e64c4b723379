"""`--timeout`: a client that stops reading its response is let go after that many seconds.

A client that neither reads nor hangs up would otherwise hold its slot for as long as the
answer takes and its socket for ever (llama-server sets the same bound on its sockets). When
a write has waited that long for the client to read, the response is abandoned exactly as if
the client had hung up: later writes are dropped and the request hears `http.disconnect`, so
a stream (and with it its generation) is cancelled (`server.disconnect`); uvicorn then closes
the connection of the unfinished response.
Websockets keep their own keep-alive and are not affected.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from .asgi import ASGIApp, Receive, Scope, Send

__all__ = ["WriteTimeoutMiddleware"]

log = logging.getLogger("llamactl.server")


_DISCONNECT = {"type": "http.disconnect"}


class _Watchdog:
    """One timer per response that cancels a write stuck for `timeout` seconds.

    A timeout around every write (a Timeout and a timer handle per token) is paid on the hot
    path; the watchdog only notes when the current write began, and its one timer looks at
    that once per `timeout` seconds, exactly as `asyncio.timeout` turns its cancellation into
    a timeout of the write alone.
    """

    __slots__ = ("timeout", "loop", "task", "since", "fired", "handle")

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.loop = asyncio.get_running_loop()
        self.task: asyncio.Task[Any] | None = None
        self.since: float | None = None
        self.fired = False
        self.handle = self.loop.call_later(timeout, self.check)

    def check(self) -> None:
        now = self.loop.time()
        since = self.since
        if since is not None and now - since >= self.timeout and self.task is not None:
            # the write has waited `timeout` seconds: end it as a timeout would
            self.fired = True
            self.task.cancel()
            return
        start = now if since is None else since
        self.handle = self.loop.call_at(start + self.timeout, self.check)

    def stop(self) -> None:
        self.handle.cancel()


class WriteTimeoutMiddleware:
    def __init__(self, app: ASGIApp, timeout: float) -> None:
        self.app = app
        self.timeout = timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        abandoned = asyncio.Event()
        watch = _Watchdog(self.timeout)

        def abandon() -> None:
            log.warning(
                "%s %s: the client read nothing for %g s; its response is abandoned",
                scope.get("method"),
                scope["path"],
                self.timeout,
            )
            abandoned.set()

        async def timed_send(message: dict[str, Any]) -> None:
            # Once abandoned, writes are dropped at once, as uvicorn drops a gone client's.
            if abandoned.is_set():
                return
            watch.task = asyncio.current_task()  # the body may be written by a child task
            watch.since = watch.loop.time()
            try:
                await send(message)
            except asyncio.CancelledError:
                if not watch.fired:
                    raise
                watch.fired = False
                _uncancel(watch.task)
                abandon()
            finally:
                watch.since = None

        async def watched_receive() -> dict[str, Any]:
            if abandoned.is_set():
                return _DISCONNECT
            message = asyncio.ensure_future(receive())
            gone = asyncio.ensure_future(abandoned.wait())
            try:
                await asyncio.wait({message, gone}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                gone.cancel()
                if not message.done():
                    message.cancel()  # takes effect later: `cancelled()` is still False
            return message.result() if message.done() else _DISCONNECT

        try:
            await self.app(scope, watched_receive, timed_send)
        finally:
            watch.stop()


def _uncancel(task: asyncio.Task[Any] | None) -> None:
    """Forget the watchdog's cancellation (Python 3.11+), as `asyncio.timeout` does."""
    uncancel = getattr(task, "uncancel", None)
    if uncancel is not None:
        uncancel()
