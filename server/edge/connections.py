"""Bounds on connections: how long a request head may take (`--header-timeout`), how many
connections are held at once (`--max-connections`), and the process's file descriptor limit.

uvicorn bounds an idle keep-alive connection (5 s) but not one that is sending its request
line and headers: a client that opens a connection and trickles a few header bytes holds a
socket (a file descriptor) for as long as it likes, and about a thousand of them used to reach
the usual soft limit of 1024 descriptors, after which nothing (`/health` included) could
connect. So, in the HTTP protocol itself, before any request reaches the app:

- the fd soft limit is raised to the hard limit when the server starts (`raise_fd_limit`);
- a connection that has not sent its whole request head within `--header-timeout` seconds of
  connecting (or of the first byte of its next request on a kept-alive connection) is answered
  408 and closed;
- past `--max-connections`, a new connection takes the place of the connection that has waited
  longest for a request head (an idle or half-sent one), so clients that send nothing cannot
  lock out one that does. When every connection is busy with a request, a few more are let in
  for `/health` only (other requests on them get a 503 naming the limit); past those the new
  connection is answered 503 and closed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import resource
import time
from typing import Any

import h11
from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

from ..errors import error_body
from .asgi import ASGIApp, Receive, Scope, Send, refuse

__all__ = ["FD_RESERVE", "HEALTH_HEADROOM", "connection_cap", "edge_protocol", "raise_fd_limit"]

log = logging.getLogger("llamactl.server")

# Descriptors kept for everything that is not a client connection: the model's files, log
# files, the precheck helper's pipes, a router's children, websockets' own bookkeeping.
FD_RESERVE = 256
# Connections let in past the cap while every held connection is busy: they answer `/health`.
HEALTH_HEADROOM = 16

_CLOSE = ((b"connection", b"close"),)


def raise_fd_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit (an unprivileged process may); return
    the soft limit in force. Idempotent; a platform that refuses keeps its limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft != resource.RLIM_INFINITY and soft >= hard:
        return soft
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (OSError, ValueError):  # macOS caps the soft limit below an "unlimited" hard one
        return soft
    return target


def connection_cap(max_connections: int, fd_limit: int) -> int:
    """The connections actually held: the setting, but never so many that the descriptors
    left for everything else run out."""
    return max(1, min(max_connections, fd_limit - FD_RESERVE - HEALTH_HEADROOM))


def _raw_refusal(status: int, reason: str, message: str, type_: str) -> bytes:
    """A whole HTTP/1.1 response, written before (or without) a request: the head may not
    have arrived, so neither the path (the error family) nor h11's state can be used."""
    body = json.dumps(error_body("/", status, message, type_)).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json; charset=utf-8\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


class _EdgeH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a request-head deadline and the connection cap."""

    header_timeout: float = 10.0
    cap: int = 1024

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._inner_app: ASGIApp = self.app
        self.app = self._guarded_app
        self._head_timer: asyncio.TimerHandle | None = None
        # when this connection began waiting for a request head; None while a request runs
        self.waiting_since: float | None = None
        self._health_only = False  # let in past the cap: answers /health only
        self._evicted = False

    # -- the connection cap
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.waiting_since = self.loop.time()
        self._arm_head_timer()
        self._admit()

    def _admit(self) -> None:
        if len(self.connections) <= self.cap:  # the usual case, without a scan
            return
        held = [p for p in self.connections if not getattr(p, "_evicted", False)]
        if len(held) <= self.cap:  # some are closing already
            return
        waiting = [
            p
            for p in held
            if isinstance(p, _EdgeH11Protocol) and p is not self and p.waiting_since is not None
        ]
        if waiting:
            oldest = min(waiting, key=lambda p: p.waiting_since or 0.0)
            _log_now_and_then(
                logging.INFO,
                "%d connections (--max-connections %d): closed the one waiting longest "
                "for a request",
                len(held),
                self.cap,
            )
            oldest._evict()
            return
        if len(held) <= self.cap + HEALTH_HEADROOM:
            self._health_only = True
            return
        message = _all_busy(self.cap)
        _log_now_and_then(logging.WARNING, "refused a connection: %s", message)
        self._close_with(_raw_refusal(503, "Service Unavailable", message, "unavailable_error"))

    def _evict(self) -> None:
        self._evicted = True
        self._cancel_head_timer()
        if not self.transport.is_closing():
            self.transport.close()

    def _close_with(self, response: bytes) -> None:
        self._evicted = True
        self._cancel_head_timer()
        if not self.transport.is_closing():
            self.transport.write(response)
            self.transport.close()

    async def _guarded_app(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._health_only and scope["type"] == "http" and not scope["path"].endswith("/health"):
            await refuse(scope, send, 503, _all_busy(self.cap), "unavailable_error", _CLOSE)
            return
        await self._inner_app(scope, receive, send)

    # -- the request-head deadline
    def data_received(self, data: bytes) -> None:
        if self.waiting_since is not None and self._head_timer is None:
            # the first byte of the next request on a kept-alive connection: its head is timed
            # from here (before it, uvicorn's keep-alive timeout applies)
            self.waiting_since = self.loop.time()
            self._arm_head_timer()
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:  # a head arrived (or the request failed)
            self.waiting_since = None
            self._cancel_head_timer()
        elif self.waiting_since is None and not self.transport.is_closing():
            # the request ended in this data (its body's last bytes came after the answer) and
            # the next one has not begun: uvicorn arms no keep-alive timer in this case
            self.waiting_since = self.loop.time()
            self._arm_head_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        # waiting for the next request; a pipelined head already part-way in is timed now
        self.waiting_since = self.loop.time()
        if self.conn.trailing_data[0]:
            self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        self.waiting_since = None
        super().connection_lost(exc)

    def _arm_head_timer(self) -> None:
        self._cancel_head_timer()
        self._head_timer = self.loop.call_later(self.header_timeout, self._head_timed_out)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        message = (
            f"the request head did not arrive within {self.header_timeout:g} s (--header-timeout)"
        )
        _log_now_and_then(logging.INFO, "%s: %s", _peer(self.client), message)
        self._close_with(_raw_refusal(408, "Request Timeout", message, "timeout_error"))


_last_logged: dict[str, float] = {}
LOG_EVERY = 10.0  # seconds between two log lines of one kind: a flood must not flood the log


def _log_now_and_then(level: int, message: str, *args: object) -> None:
    """Log `message` unless the same kind of line was logged less than LOG_EVERY s ago."""
    now = time.monotonic()
    if now - _last_logged.get(message, -LOG_EVERY) >= LOG_EVERY:
        _last_logged[message] = now
        log.log(level, message, *args)


def _all_busy(cap: int) -> str:
    return f"the server holds its limit of {cap} connections, all busy (--max-connections)"


def _peer(client: tuple[str, int] | None) -> str:
    return f"{client[0]}:{client[1]}" if client else "a client"


def edge_protocol(header_timeout: float, max_connections: int) -> type[H11Protocol]:
    """The HTTP protocol class for uvicorn's `http` option, bound to these settings; the cap
    is lowered to what the descriptor limit (raised first) can hold."""
    cap = connection_cap(max_connections, raise_fd_limit())
    return type(
        "EdgeH11Protocol",
        (_EdgeH11Protocol,),
        {"header_timeout": header_timeout, "cap": cap, "__module__": __name__},
    )
