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
import sys
from collections.abc import Awaitable
from typing import Any

from .asgi import ASGIApp, Receive, Scope, Send

__all__ = ["WriteTimeoutMiddleware"]

log = logging.getLogger("llamactl.server")


if sys.version_info >= (3, 11):

    async def _within(seconds: float, aw: Awaitable[None]) -> None:
        async with asyncio.timeout(seconds):  # a timer, no task per write
            await aw

else:

    async def _within(seconds: float, aw: Awaitable[None]) -> None:
        await asyncio.wait_for(aw, seconds)


_DISCONNECT = {"type": "http.disconnect"}


class WriteTimeoutMiddleware:
    def __init__(self, app: ASGIApp, timeout: float) -> None:
        self.app = app
        self.timeout = timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        abandoned = asyncio.Event()

        async def timed_send(message: dict[str, Any]) -> None:
            # Once abandoned, writes are dropped at once, as uvicorn drops a gone client's.
            if abandoned.is_set():
                return
            try:
                await _within(self.timeout, send(message))
            except (TimeoutError, asyncio.TimeoutError):
                log.warning(
                    "%s %s: the client read nothing for %g s; its response is abandoned",
                    scope.get("method"),
                    scope["path"],
                    self.timeout,
                )
                abandoned.set()

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

        await self.app(scope, watched_receive, timed_send)
