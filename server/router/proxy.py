"""HTTP proxy: forward a request to its model's child and stream the answer back unbuffered.

Plain ASGI: the request body is read whole (it names the model), the response is passed
through chunk by chunk as the child writes it, so SSE events reach the client as they are
made. A client that goes away closes the upstream connection, which stops the generation in
the child. A child found dead when connecting is recorded and, with autoload, restarted once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

import anyio

from ..errors import APIError, error_body, is_anthropic_path
from ..middleware import Receive, Scope, Send
from .child import ChildProcess
from .manager import ModelManager, ModelState
from .selection import (
    autoload_for,
    query_params,
    rename_model,
    requested_model,
    with_query_model,
)
from .upstream import ConnectFailed, Response, UpstreamError, Upstreams

log = logging.getLogger("llamactl.router")

HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"trailers",
        b"transfer-encoding",
        b"upgrade",
    }
)
# Not forwarded to children: they are keyless, the length is set from the body (read whole
# already, so a client's `Expect: 100-continue` was answered by the router).
_DROP_REQUEST = HOP_BY_HOP | {
    b"host",
    b"content-length",
    b"expect",
    b"authorization",
    b"x-api-key",
}
# Not passed back: the router's own server adds these (CORS, request id, date, server).
_DROP_RESPONSE = HOP_BY_HOP | {b"date", b"server", b"x-request-id", b"vary"}

MISSING_MODEL = "model name is missing from the request"


def header(scope: Scope, name: bytes) -> str:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return value.decode("latin-1")
    return ""


def upstream_headers(scope: Scope) -> list[tuple[bytes, bytes]]:
    """The client's headers minus hop-by-hop and credentials, plus the router's request id."""
    headers = [(k, v) for k, v in scope.get("headers", ()) if k.lower() not in _DROP_REQUEST]
    request_id = scope.get("state", {}).get("request_id")
    if request_id and not any(k.lower() == b"x-request-id" for k, _ in headers):
        headers.append((b"x-request-id", request_id.encode()))
    return headers


def downstream_headers(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The child's response headers (lower-cased names) minus what the router sets itself."""
    return [
        (k, v)
        for k, v in headers
        if k not in _DROP_RESPONSE and not k.startswith(b"access-control-")
    ]


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
    """A final event telling a streaming client that the model went away mid-answer."""
    body = error_body(path, 500, message, "server_error")
    if is_anthropic_path(path):
        return f"event: error\ndata: {json.dumps(body)}\n\n".encode()
    return f"data: {json.dumps(body)}\n\n".encode()


class HttpProxy:
    """The ASGI app behind every route the router does not answer itself."""

    def __init__(self, manager: ModelManager, *, autoload: bool) -> None:
        self.manager = manager
        self.autoload = autoload
        self.upstreams = Upstreams()

    async def aclose(self) -> None:
        self.upstreams.close()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await read_body(receive)
        if body is None:
            return
        query = query_params(scope.get("query_string", b""))
        name = requested_model(query, header(scope, b"content-type"), body)
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
                body = rename_model(header(scope, b"content-type"), body, state.spec.name)
                qs = with_query_model(scope.get("query_string", b""), state.spec.name)
                scope = {**scope, "query_string": qs}
                name = state.spec.name
            try:
                retry = await self._forward(scope, receive, send, state, body, last=attempt == 1)
            finally:
                self.manager.release(state)
            if not retry:
                return

    async def _forward(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        state: ModelState,
        body: bytes,
        *,
        last: bool,
    ) -> bool:
        """Forward once; True when the child was found dead before it saw the request."""
        child = state.child
        assert child is not None
        target = (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
        if scope.get("query_string"):
            target += "?" + scope["query_string"].decode("latin-1")
        pool = self.upstreams.pool(child.port)
        try:
            response = await pool.request(scope["method"], target, upstream_headers(scope), body)
        except UpstreamError as e:
            dead = await _has_exited(child)
            if dead:
                self.upstreams.forget(child.port)
                self.manager.child_died(state, child)
                if isinstance(e, ConnectFailed) and not last:
                    return True
            reason = child.exit_message() if dead else str(e)
            await send_error(
                scope, send, APIError(500, f"model '{state.spec.name}' is unavailable: {reason}")
            )
            return False
        try:
            await self._relay(scope, receive, send, state, response)
        finally:
            response.close()
        return False

    async def _relay(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        state: ModelState,
        response: Response,
    ) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": response.status,
                "headers": downstream_headers(response.headers),
            }
        )
        ctype = response.header(b"content-type") or b""
        streaming = ctype.startswith(b"text/event-stream")
        async with anyio.create_task_group() as tg:
            tg.start_soon(_cancel_on_disconnect, receive, tg.cancel_scope)
            try:
                async for chunk in response.body():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            except UpstreamError as e:
                log.warning("model %s: response cut off: %s", state.spec.name, e)
                if streaming:
                    message = f"model '{state.spec.name}' stopped mid-answer"
                    event = sse_error_event(scope["path"], message)
                    await send({"type": "http.response.body", "body": event, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            tg.cancel_scope.cancel()


async def _cancel_on_disconnect(receive: Receive, scope: Any) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    scope.cancel()


async def _has_exited(child: ChildProcess) -> bool:
    """Whether the child is dead; a process killed a moment ago may not be reaped yet."""
    if child.proc is None:
        return True
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(asyncio.shield(child.proc.wait()), 1.0)
    return child.proc.returncode is not None
