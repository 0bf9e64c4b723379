"""A child's listening socket, bound by the router and inherited by the child.

Why: a child that binds a port the router chose (and put in its command line) leaves a moment
in which any local process can bind that port first; the router would then send that process
the user's prompt and the child's secret, and pass its forged answer back. Instead the router
binds 127.0.0.1 on port 0 and listens before the child exists, the child inherits the socket
(`pass_fds`, `llamactl serve --listen-fd N`), and the router keeps its own copy until it has
seen the child exit. So, for as long as the router may connect to the port:

- no other socket can be bound to it: Linux refuses a bind that overlaps a listening socket
  (the wildcard address and SO_REUSEADDR included; SO_REUSEPORT would need this socket to set
  it too, and it never does);
- every connection the router makes to it is queued on this socket, which only the router and
  its child hold: the child accepts it, or, if the child died first, the router drains it
  from the queue itself when it sees the exit (`retire`), so the request reached nobody and
  may be sent to a restarted child (`never_reached`);
- the router connects only while it still holds the socket, and checks again when the
  connection is made (`connect`): a connection completed after the port was let go could
  have reached a process that bound it since, and is dropped before a byte is written.

`server.router.proof` then checks that the process answering on the socket knows the child's
secret before any request is sent to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import socket

from llamactl import UpstreamConnectError

HOST = "127.0.0.1"
BACKLOG = 2048  # uvicorn's default: the child's own listen() uses it too
_IN_PROGRESS = {errno.EINPROGRESS, errno.EAGAIN, errno.EALREADY}


class ChildListener:
    """127.0.0.1:`port`, listening from construction until `retire()`."""

    def __init__(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind((HOST, 0))
            sock.listen(BACKLOG)
        except BaseException:
            sock.close()
            raise
        self._sock: socket.socket | None = sock
        self.port: int = sock.getsockname()[1]
        self.fd: int = sock.fileno()
        self._never_reached: set[int] = set()

    def __repr__(self) -> str:
        return f"<ChildListener port={self.port} open={self.open}>"

    @property
    def open(self) -> bool:
        """The router still holds the port: a connection to it reaches the child or no one."""
        return self._sock is not None

    def retire(self) -> None:
        """After the child exited: take the connections it never accepted off the queue (their
        requests reached no one), then let go of the port. Idempotent."""
        sock, self._sock = self._sock, None
        if sock is None:
            return
        try:
            # O_NONBLOCK belongs to the descriptor the child shared, so it is set only now
            sock.setblocking(False)
            while True:
                try:
                    conn, peer = sock.accept()
                except OSError:  # BlockingIOError: the queue is empty
                    break
                self._never_reached.add(peer[1])
                conn.close()
        finally:
            sock.close()

    def never_reached(self, local_port: int) -> bool:
        """Was the router's connection from `local_port` drained by `retire`, unread by the
        child? Then nothing it carried was seen, and the request may be sent again."""
        return local_port in self._never_reached

    async def connect(self) -> socket.socket:
        """A connected, non-blocking socket to the child; UpstreamConnectError (nothing was
        sent) when the port is no longer held, or was let go before the connection was made.

        The connect() call runs in the same step of the event loop as the check that the port
        is held, so the SYN goes to this socket's queue."""
        if self._sock is None:
            raise UpstreamConnectError("the child has exited")
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            code = sock.connect_ex((HOST, self.port))
            if code in _IN_PROGRESS:
                await _writable(sock)
                code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if code:
                raise UpstreamConnectError(os.strerror(code))
            if self._sock is None:
                raise UpstreamConnectError("the child exited while connecting")
        except BaseException:
            sock.close()
            raise
        return sock


async def _writable(sock: socket.socket) -> None:
    """Until a non-blocking connect() has finished (successfully or not)."""
    loop = asyncio.get_running_loop()
    done = loop.create_future()

    def ready() -> None:
        if not done.done():
            done.set_result(None)

    loop.add_writer(sock.fileno(), ready)
    try:
        await done
    finally:
        with contextlib.suppress(Exception):
            loop.remove_writer(sock.fileno())


def adopt_listener(fd: int) -> socket.socket:
    """The child's side: the listening TCP socket inherited as `fd` (`--listen-fd`), no
    longer inheritable by the child's own subprocesses. ValueError when `fd` is not one."""
    try:
        sock = socket.socket(fileno=fd)
    except OSError as e:
        raise ValueError(f"descriptor {fd} is not a socket: {e.strerror or e}") from None
    try:
        listening = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
        if sock.family not in (socket.AF_INET, socket.AF_INET6) or not listening:
            raise ValueError(f"descriptor {fd} is not a listening TCP socket")
        if sock.type != socket.SOCK_STREAM:
            raise ValueError(f"descriptor {fd} is not a listening TCP socket")
    except BaseException:
        sock.detach()  # not ours to close: the caller's descriptor stays as it was
        raise
    sock.set_inheritable(False)
    return sock
