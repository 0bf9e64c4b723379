"""A lean HTTP/1.1 client for the hop from router to child, with keep-alive connections.

Why not httpx: a streamed answer is one small chunk per token, and on a machine whose cores
all run the model, every microsecond the router spends per chunk is taken from generation.
httpx's layers (httpcore, h11, anyio) cost several times what reading a chunk needs; this
reads chunked or sized bodies straight from an asyncio stream. The child is our own
server on loopback, so only what it sends has to be understood.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from llamactl import UpstreamConnectError, UpstreamError

_MAX_HEAD = 64 * 1024
_READ = 64 * 1024
_NO_BODY = {204, 304}
# An idle connection is reused only this long: well inside the child's keep-alive (uvicorn's
# default is 5 s), so the child never closes one while a request is being written on it.
MAX_IDLE_SECONDS = 2.0


class ChildSocket(Protocol):
    """Where a child listens (`listener.ChildListener`): connections are made only while
    the router holds the port, and it knows which ones the child never accepted."""

    async def connect(self) -> socket.socket: ...

    def never_reached(self, local_port: int) -> bool: ...


@dataclass
class _Conn:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    idle_since: float = 0.0  # monotonic time it was given back to the pool
    local_port: int = 0  # the router's end

    def close(self) -> None:
        self.writer.close()

    def reusable(self) -> bool:
        """Open at both ends, and not idle for so long that the child may be closing it."""
        return (
            not self.reader.at_eof()
            and not self.writer.is_closing()
            and time.monotonic() - self.idle_since < MAX_IDLE_SECONDS
        )


@dataclass
class Response:
    status: int
    headers: list[tuple[bytes, bytes]]
    _conn: _Conn = field(repr=False)
    _pool: Pool = field(repr=False)
    _length: int | None = None  # None: chunked, or until EOF when not chunked
    _chunked: bool = False
    _reusable: bool = True
    _done: bool = False

    @property
    def length(self) -> int | None:
        """The body's size when the child announced it (0 for bodiless answers)."""
        return None if self._chunked else self._length

    def header(self, name: bytes) -> bytes | None:
        for key, value in self.headers:
            if key.lower() == name:
                return value
        return None

    async def body(self) -> AsyncIterator[bytes]:
        """The body's bytes as they arrive (chunked framing removed)."""
        reader = self._conn.reader
        try:
            if self._chunked:
                async for data in _dechunk(reader):
                    yield data
            elif self._length is not None:
                left = self._length
                while left > 0:
                    data = await reader.read(min(left, _READ))
                    if not data:
                        raise UpstreamError("connection closed before the body ended")
                    left -= len(data)
                    yield data
            else:
                self._reusable = False
                while data := await reader.read(_READ):
                    yield data
            self._done = True
        except (OSError, ValueError, asyncio.IncompleteReadError) as e:
            raise UpstreamError(str(e) or type(e).__name__) from e

    def close(self) -> None:
        """Give the connection back for reuse when the body was read whole, else drop it."""
        if self._done and self._reusable:
            self._pool.put(self._conn)
        else:
            self._conn.close()


async def _dechunk(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    """A chunked body's data: one socket read per wake-up, every whole chunk in it passed on
    at once (a token's event is one chunk; several that arrived together go out together).
    A chunk larger than a read is passed on read by read, never held whole."""
    buf = bytearray()
    while True:
        out: list[bytes] = []
        pos = 0
        while True:  # the whole chunks in buf[pos:]
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                break
            size = int(bytes(buf[pos:eol]).split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                if buf.find(b"\r\n\r\n", eol) >= 0:  # the last chunk, then trailers
                    if out:
                        yield b"".join(out)
                    return
                break
            start = eol + 2
            have = len(buf) - start
            if have >= size + 2:
                out.append(bytes(buf[start : start + size]))
                pos = start + size + 2
            elif size > _READ:
                if out:
                    yield b"".join(out)
                    out = []
                # passed on in reads of at most _READ: a huge chunk is never held whole
                held = min(have, size)
                if held:
                    yield bytes(buf[start : start + held])
                left = size - held
                while left:
                    data = await reader.readexactly(min(left, _READ))
                    left -= len(data)
                    yield data
                await reader.readexactly(2 - (have - held))  # the chunk's CRLF
                buf.clear()
                pos = 0
            else:
                break
        if out:
            yield out[0] if len(out) == 1 else b"".join(out)
        del buf[:pos]
        data = await reader.read(_READ)
        if not data:
            raise UpstreamError("connection closed inside a chunked body")
        buf += data


class Pool:
    """Idle keep-alive connections to one child.

    With `child` (the router's pools), connections are made through the child's listener:
    only while the router holds its port, so a request can never reach a process that bound
    the port after the child died. Without it (a plain server), to `host`:`port`."""

    def __init__(
        self, host: str, port: int, *, keep: int = 16, child: ChildSocket | None = None
    ) -> None:
        self.host = host
        self.port = port
        self.keep = keep
        self.child = child
        self._idle: list[_Conn] = []

    def put(self, conn: _Conn) -> None:
        conn.idle_since = time.monotonic()
        if len(self._idle) < self.keep and conn.reusable():
            self._idle.append(conn)
        else:
            conn.close()

    def close(self) -> None:
        while self._idle:
            self._idle.pop().close()

    async def _connect(self) -> _Conn:
        try:
            if self.child is None:
                reader, writer = await asyncio.open_connection(
                    self.host, self.port, limit=_MAX_HEAD
                )
            else:
                sock = await self.child.connect()
                try:
                    reader, writer = await asyncio.open_connection(sock=sock, limit=_MAX_HEAD)
                except BaseException:
                    sock.close()
                    raise
        except OSError as e:
            raise UpstreamConnectError(str(e) or type(e).__name__) from e
        sockname = writer.get_extra_info("sockname")
        return _Conn(reader, writer, local_port=sockname[1] if sockname else 0)

    async def request(
        self, method: str, target: str, headers: Sequence[tuple[bytes, bytes]], body: bytes
    ) -> Response:
        """Send a request once and read the response head; the body is read with `body()`.

        Nothing is ever sent twice: UpstreamConnectError means no byte reached the child; any
        other UpstreamError means it may have seen the request. Idle connections are checked
        before use (one turn of the event loop first, so a close the child sent is seen).
        """
        head = [f"{method} {target} HTTP/1.1\r\n".encode("latin-1")]
        head.append(f"host: {self.host}:{self.port}\r\n".encode("latin-1"))
        head += [k + b": " + v + b"\r\n" for k, v in headers]
        if body or method not in ("GET", "HEAD", "DELETE", "OPTIONS"):
            head.append(b"content-length: %d\r\n" % len(body))
        data = b"".join(head) + b"\r\n" + body
        conn = await self._idle_conn()
        fresh = conn is None
        if conn is None:
            conn = await self._connect()
        try:
            return await self._exchange(conn, method, data)
        except UpstreamError as e:
            conn.close()
            if fresh and self.child is not None and self.child.never_reached(conn.local_port):
                # the child died with this connection still in its queue: the router took it
                # off and closed it, so not a byte of the request was read
                raise UpstreamConnectError("the child exited before it took the request") from e
            raise
        except BaseException:
            conn.close()
            raise

    async def _idle_conn(self) -> _Conn | None:
        """A pooled connection that is still usable, closing the stale ones."""
        if not self._idle:
            return None
        await asyncio.sleep(0)  # lets the loop read a FIN that is already in
        while self._idle:
            conn = self._idle.pop()
            if conn.reusable():
                return conn
            conn.close()
        return None

    async def _exchange(self, conn: _Conn, method: str, data: bytes) -> Response:
        try:
            conn.writer.write(data)
            await conn.writer.drain()
            raw = await conn.reader.readuntil(b"\r\n\r\n")
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as e:
            raise UpstreamError(str(e) or type(e).__name__) from e
        lines = raw.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise UpstreamError(f"not an HTTP response: {lines[0][:80]!r}")
        headers = []
        for line in lines[1:]:
            if line:
                key, _, value = line.partition(b":")
                headers.append((key.strip().lower(), value.strip()))
        resp = Response(int(parts[1]), headers, conn, self)
        connection = (resp.header(b"connection") or b"").lower()
        resp._reusable = connection != b"close" and parts[0] == b"HTTP/1.1"
        encoding = (resp.header(b"transfer-encoding") or b"").lower()
        length = resp.header(b"content-length")
        if method == "HEAD" or resp.status in _NO_BODY or 100 <= resp.status < 200:
            resp._length = 0
        elif b"chunked" in encoding:
            resp._chunked = True
        elif length is not None:
            if not length.isdigit():
                raise UpstreamError(f"bad content-length: {length[:40]!r}")
            resp._length = int(length)
        return resp


class Upstreams:
    """One pool per child port."""

    def __init__(self) -> None:
        self._pools: dict[int, Pool] = {}

    def pool(self, port: int, child: ChildSocket) -> Pool:
        """The pool of the child listening through `child` on `port` (a pool left by an
        earlier child on the same port is dropped)."""
        pool = self._pools.get(port)
        if pool is not None and pool.child is not child:
            self.forget(port)
            pool = None
        if pool is None:
            pool = self._pools[port] = Pool("127.0.0.1", port, child=child)
        return pool

    def forget(self, port: int) -> None:
        """Drop a stopped child's connections."""
        pool = self._pools.pop(port, None)
        if pool is not None:
            pool.close()

    def close(self) -> None:
        for port in list(self._pools):
            self.forget(port)
