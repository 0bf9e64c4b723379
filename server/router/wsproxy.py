"""Websocket proxy: any websocket path (e.g. `/v1/realtime`) is relayed to its model's child.

The model comes from `?model=`. The handshake is completed with the client only after the
child accepted it, so a child's refusal (404, 400) reaches the client as that same HTTP
answer. Then frames are copied both ways, and a close on either side closes the other with
the same code.
"""

from __future__ import annotations

import contextlib
import json
import logging

import anyio
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus
from websockets.typing import Subprotocol

from llamactl import UpstreamConnectError

from ..errors import APIError, error_body
from ..middleware import Receive, Scope, Send
from .manager import ModelManager
from .proxy import MISSING_MODEL, has_control_bytes, unsafe_header, upstream_headers
from .selection import autoload_for, query_params, with_query_model

log = logging.getLogger("llamactl.router")
# The websockets library logs handshake headers at DEBUG: the child's secret among them. Its
# client connections to children log here, never below INFO.
_client_log = logging.getLogger("llamactl.router.websocket")
_client_log.setLevel(logging.INFO)

# Handshake headers the client library sets itself for the upstream connection
_OWN_HANDSHAKE = (b"sec-websocket-", b"origin")
# Close codes that name a condition but may not be sent in a close frame
_RESERVED_CLOSE = {1005: 1000, 1006: 1011, 1015: 1011}


async def deny(scope: Scope, send: Send, status: int, body: bytes, ctype: bytes) -> None:
    """Refuse the handshake with an HTTP answer where the server supports it."""
    if "websocket.http.response" in scope.get("extensions", {}):
        await send(
            {
                "type": "websocket.http.response.start",
                "status": status,
                "headers": [(b"content-type", ctype)],
            }
        )
        await send({"type": "websocket.http.response.body", "body": body})
    else:
        await send({"type": "websocket.close", "code": 1008})


async def deny_error(scope: Scope, send: Send, err: APIError) -> None:
    body = json.dumps(error_body(scope["path"], err.status, err.message, err.type)).encode()
    await deny(scope, send, err.status, body, b"application/json; charset=utf-8")


class WebSocketProxy:
    """The ASGI websocket app behind every websocket path."""

    def __init__(self, manager: ModelManager, *, autoload: bool) -> None:
        self.manager = manager
        self.autoload = autoload

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (await receive())["type"] != "websocket.connect":
            return
        raw_path = scope.get("raw_path") or scope["path"].encode("utf-8")
        if unsafe_header(scope.get("headers", ())) or has_control_bytes(raw_path):
            await deny_error(scope, send, APIError(400, "the handshake has a control character"))
            return
        query = query_params(scope.get("query_string", b""))
        name = query.get("model")
        if not name:
            await deny_error(scope, send, APIError(400, MISSING_MODEL))
            return
        try:
            state = await self.manager.acquire(name, autoload=autoload_for(query, self.autoload))
        except APIError as e:
            await deny_error(scope, send, e)
            return
        try:
            child = state.child
            assert child is not None
            url = f"ws://127.0.0.1:{child.port}{raw_path.decode('latin-1')}"
            query_string = with_query_model(scope.get("query_string", b""), state.spec.name)
            if query_string:
                url += "?" + query_string.decode("latin-1")
            headers = [
                (k.decode("latin-1"), v.decode("latin-1"))
                for k, v in upstream_headers(scope, child.secret)
                if not k.lower().startswith(_OWN_HANDSHAKE) and k.lower() != b"user-agent"
            ]
            protocols = [Subprotocol(p) for p in scope.get("subprotocols", ())] or None
            try:
                # through the child's listener: only while the router holds its port
                sock = await child.listener.connect()
            except UpstreamConnectError as e:
                message = f"model '{state.spec.name}' is unavailable: {e}"
                await deny_error(scope, send, APIError(503, message))
                return
            try:
                upstream = await connect(
                    url,
                    sock=sock,
                    additional_headers=headers,
                    subprotocols=protocols,
                    proxy=None,
                    compression=None,
                    max_size=None,
                    ping_interval=None,
                    open_timeout=30,
                    user_agent_header=None,
                    logger=_client_log,
                )
            except InvalidStatus as e:
                resp = e.response
                ctype = resp.headers.get("content-type", "application/json").encode("latin-1")
                await deny(scope, send, resp.status_code, bytes(resp.body or b""), ctype)
                return
            except (OSError, InvalidHandshake, TimeoutError) as e:
                sock.close()
                message = f"model '{state.spec.name}' refused the websocket: {e}"
                await deny_error(scope, send, APIError(500, message))
                return
            except BaseException:
                sock.close()
                raise
            async with upstream:
                # the request id, as every HTTP answer carries it (the child logged this one)
                request_id = scope.get("state", {}).get("request_id", "")
                accept_headers = [(b"x-request-id", request_id.encode("latin-1", "replace"))]
                await send(
                    {
                        "type": "websocket.accept",
                        "subprotocol": upstream.subprotocol,
                        "headers": accept_headers if request_id else [],
                    }
                )
                await _pump(receive, send, upstream)
        finally:
            self.manager.release(state)


async def _pump(receive: Receive, send: Send, upstream: ClientConnection) -> None:
    """Copy frames both ways until either side closes; then close the other."""
    async with anyio.create_task_group() as tg:

        async def from_client() -> None:
            while True:
                message = await receive()
                if message["type"] == "websocket.receive":
                    data = message.get("text")
                    try:
                        await upstream.send(data if data is not None else message["bytes"])
                    except ConnectionClosed:
                        return  # from_child relays the child's close
                elif message["type"] == "websocket.disconnect":
                    code: int = message.get("code") or 1000
                    reason = message.get("reason") or ""
                    await upstream.close(_RESERVED_CLOSE.get(code, code), reason)
                    tg.cancel_scope.cancel()
                    return

        async def from_child() -> None:
            try:
                async for data in upstream:
                    key = "text" if isinstance(data, str) else "bytes"
                    await send({"type": "websocket.send", key: data})
            except ConnectionClosed:
                pass
            code = upstream.close_code or 1000
            with contextlib.suppress(OSError, RuntimeError):  # the client may be gone too
                await send(
                    {
                        "type": "websocket.close",
                        "code": _RESERVED_CLOSE.get(code, code),
                        "reason": upstream.close_reason or "",
                    }
                )
            tg.cancel_scope.cancel()

        tg.start_soon(from_client)
        tg.start_soon(from_child)
