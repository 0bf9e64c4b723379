"""HTTP proxy: forward a request to its model's child and stream the answer back unbuffered.

Plain ASGI: the request body is read whole (it names the model), the response is passed
through chunk by chunk as the child writes it, so SSE events reach the client as they are
made. A client that goes away, even before the answer began, closes the upstream connection,
which stops the generation in the child.

A request is sent to a child once. Only a child found dead with its port refusing the
connection (so not a byte of the request reached it) is restarted and the request sent again;
a child that dies after the request was written is a 502 for that request (an error event
mid-stream), never a second run of it in a new child.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Iterable

import anyio

from llamactl import UpstreamConnectError, UpstreamError

from ..disconnect import watch_disconnect
from ..errors import APIError, error_body
from ..middleware import Receive, Scope, Send
from ..stream_errors import stream_error_frame
from .child import ChildProcess
from .manager import ModelManager, ModelState
from .selection import (
    autoload_for,
    locate_model,
    query_params,
    rename_model,
    with_query_model,
)
from .upstream import Response, Upstreams

log = logging.getLogger("llamactl.router")

HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"trailers",
        b"transfer-encoding",
        b"upgrade",
    }
)
# Not forwarded to children. Credentials: a child takes only the router's secret for it. The
# length is set from the body (read whole already, so an `Expect: 100-continue` was answered by
# the router). The router decided CORS and the request id, and knows the client's address;
# a child must not be told otherwise by the client.
_DROP_REQUEST = HOP_BY_HOP | {
    b"host",
    b"content-length",
    b"expect",
    b"authorization",
    b"x-api-key",
    b"origin",
    b"x-request-id",
    b"forwarded",
    b"x-forwarded-for",
    b"x-forwarded-host",
    b"x-forwarded-proto",
    b"x-real-ip",
}
# Not passed back: the router's own server adds these (CORS, request id, date, server).
_DROP_RESPONSE = HOP_BY_HOP | {b"date", b"server", b"x-request-id", b"vary"}
# A non-streamed answer up to this size is read whole before it is passed on, so a child that
# dies while sending it is a clean 502 rather than a truncated body.
_BUFFER_UP_TO = 1024 * 1024
_UNSAFE = frozenset(b"\r\n\0")

MISSING_MODEL = "model name is missing from the request"


def header(scope: Scope, name: bytes) -> str:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return value.decode("latin-1")
    return ""


def _connection_tokens(headers: Iterable[tuple[bytes, bytes]]) -> set[bytes]:
    """Headers the sender marked hop-by-hop by naming them in `Connection`."""
    tokens: set[bytes] = set()
    for key, value in headers:
        if key.lower() == b"connection":
            tokens.update(t.strip().lower() for t in value.split(b","))
    return tokens


def upstream_headers(scope: Scope, secret: str) -> list[tuple[bytes, bytes]]:
    """The client's end-to-end headers, plus the router's request id, the client's address
    and the child's secret (which replaces whatever key the client sent)."""
    raw = scope.get("headers", ())
    drop = _DROP_REQUEST | _connection_tokens(raw)
    headers = [(k, v) for k, v in raw if k.lower() not in drop]
    request_id = scope.get("state", {}).get("request_id")
    if request_id:
        headers.append((b"x-request-id", request_id.encode("latin-1", "replace")))
    client = scope.get("client")
    if client:
        headers.append((b"x-forwarded-for", str(client[0]).encode("latin-1", "replace")))
    headers.append((b"authorization", b"Bearer " + secret.encode("ascii")))
    return headers


def unsafe_header(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """The name of a header whose name or value could end a line of the request to the child
    (CR, LF, NUL): the router writes heads itself, so it must never pass one on."""
    for key, value in headers:
        if _UNSAFE.intersection(key) or _UNSAFE.intersection(value):
            return key.decode("latin-1", "replace")[:64]
    return None


def downstream_headers(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The child's response headers (lower-cased names) minus what the router sets itself."""
    drop = _DROP_RESPONSE | _connection_tokens(headers)
    return [(k, v) for k, v in headers if k not in drop and not k.startswith(b"access-control-")]


async def send_error(scope: Scope, send: Send, err: APIError) -> None:
    body = json.dumps(error_body(scope["path"], err.status, err.message, err.type)).encode()
    await send(
        {
            "type": "http.response.start",
            "status": err.status,
            "headers": [
                (b"content-type", b"application/json; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def read_body(receive: Receive) -> bytes | None:
    """The whole request body; None if the client left first."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def sse_error_event(path: str, message: str) -> bytes:
    """A final event telling a streaming client that the model went away mid-answer, in the
    shape its API streams errors (server/stream_errors.py)."""
    return stream_error_frame(path, APIError(502, message, "server_error")).encode()


def request_target(scope: Scope) -> str | None:
    """The path and query as the client sent them; None if a byte could break the line."""
    target = scope.get("raw_path") or scope["path"].encode("utf-8")
    if scope.get("query_string"):
        target += b"?" + scope["query_string"]
    return None if has_control_bytes(target) else target.decode("latin-1")


def has_control_bytes(target: bytes) -> bool:
    """Whether a request target holds a space or control byte (never valid in one)."""
    return any(b <= 0x20 or b == 0x7F for b in target)


class _Retry(Exception):
    """The child was found dead before the request reached it: restart it and send again."""


class HttpProxy:
    """The ASGI app behind every route the router does not answer itself."""

    def __init__(self, manager: ModelManager, *, autoload: bool) -> None:
        self.manager = manager
        self.autoload = autoload
        self.upstreams = Upstreams()

    async def aclose(self) -> None:
        self.upstreams.close()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        bad = unsafe_header(scope.get("headers", ()))
        if bad is not None:
            await send_error(scope, send, APIError(400, f"header '{bad}' has a control character"))
            return
        if request_target(scope) is None:
            message = "the request target has a control character"
            await send_error(scope, send, APIError(400, message))
            return
        body = await read_body(receive)
        if body is None:
            return
        query = query_params(scope.get("query_string", b""))
        ctype = header(scope, b"content-type")
        try:
            found = await locate_model(ctype, body)
        except APIError as e:
            await send_error(scope, send, e)
            return
        name = found.name if found else query.get("model") or None
        if name is None:
            await send_error(scope, send, APIError(400, MISSING_MODEL))
            return
        autoload = autoload_for(query, self.autoload)
        for attempt in range(2):
            try:
                state = await self.manager.acquire(name, autoload=autoload)
            except APIError as e:
                await send_error(scope, send, e)
                return
            if name != state.spec.name:  # an alias: the child knows the canonical name only
                if found is not None:
                    body = rename_model(body, found, state.spec.name)
                qs = with_query_model(scope.get("query_string", b""), state.spec.name)
                scope = {**scope, "query_string": qs}
                name = state.spec.name
            try:
                await self._forward(scope, receive, send, state, body, last=attempt == 1)
                return
            except _Retry:
                continue
            finally:
                self.manager.release(state)

    async def _forward(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        state: ModelState,
        body: bytes,
        *,
        last: bool,
    ) -> None:
        """Send the request once and relay the answer; `_Retry` only when the child was dead
        before any byte of the request reached it. A client that leaves, even while a
        non-streamed answer is being generated, closes the connection to the child, which
        stops the generation."""
        child = state.child
        assert child is not None
        target = request_target(scope)
        assert target is not None
        pool = self.upstreams.pool(child.port, child.listener)
        headers = upstream_headers(scope, child.secret)
        failure: UpstreamError | None = None
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch_disconnect, receive, tg.cancel_scope.cancel)
            try:
                response = await pool.request(scope["method"], target, headers, body)
            except UpstreamError as e:
                failure = e
            else:
                try:
                    failure = await self._relay(scope, send, state.spec.name, response)
                finally:
                    response.close()
            tg.cancel_scope.cancel()
        if failure is not None:
            await self._failed(scope, send, state, child, failure, last=last)

    async def _failed(
        self,
        scope: Scope,
        send: Send,
        state: ModelState,
        child: ChildProcess,
        error: UpstreamError,
        *,
        last: bool,
    ) -> None:
        """No answer from the child: a retry if it never saw the request, else a 502/503."""
        model = state.spec.name
        dead = await _has_exited(child)
        if dead:
            self.upstreams.forget(child.port)
            self.manager.child_died(state, child)
        if isinstance(error, UpstreamConnectError):
            if dead and not last:
                raise _Retry
            reason = child.exit_message() if dead else str(error)
            message = f"model '{model}' is unavailable: {reason}"
            await send_error(scope, send, APIError(503, message))
            return
        if dead:
            message = f"model '{model}' stopped before answering: {child.exit_message()}"
        else:
            message = f"model '{model}' broke the connection: {error}"
        log.warning("%s %s: %s", scope["method"], scope["path"], message)
        await send_error(scope, send, APIError(502, message))

    async def _relay(
        self, scope: Scope, send: Send, model: str, response: Response
    ) -> UpstreamError | None:
        """Pass the answer on as the child writes it: a stream chunk by chunk, a small sized
        body read whole first (its failure is returned: nothing was sent yet). A stream cut
        off ends with an error event; another body cut off after its head was sent is left
        unfinished, which closes the client's connection: a truncated body never looks whole."""
        ctype = response.header(b"content-type") or b""
        streaming = ctype.startswith(b"text/event-stream")
        start = {
            "type": "http.response.start",
            "status": response.status,
            "headers": downstream_headers(response.headers),
        }
        length = response.length
        if not streaming and length is not None and length <= _BUFFER_UP_TO:
            try:
                data = b"".join([chunk async for chunk in response.body()])
            except UpstreamError as e:
                return e
            await send(start)
            await send({"type": "http.response.body", "body": data})
            return None
        await send(start)
        try:
            async for chunk in response.body():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except UpstreamError as e:
            log.warning("model %s: response cut off: %s", model, e)
            if not streaming:
                return None
            event = sse_error_event(scope["path"], f"model '{model}' stopped mid-answer")
            await send({"type": "http.response.body", "body": event, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return None


async def _has_exited(child: ChildProcess) -> bool:
    """Whether the child is dead; a process killed a moment ago may not be reaped yet."""
    if child.proc is None:
        return True
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(asyncio.shield(child.proc.wait()), 1.0)
    return child.proc.returncode is not None
