"""The Realtime protocol's errors, defined once in `llamactl.core.errors` and named here for
the protocol's users: `ProtocolError` (a refused client event: the server turns it into an
`error` event and the socket stays open; not a `ValueError`, so pydantic lets the first one
through unchanged) and the client's failures, each message saying what to do."""

from __future__ import annotations

from llamactl.core.errors import (
    MAX_PROTOCOL_MESSAGE,
    AuthenticationError,
    ConnectionClosedError,
    ProtocolError,
    RealtimeClientError,
    ServerUnreachableError,
)

MAX_MESSAGE = MAX_PROTOCOL_MESSAGE

__all__ = [
    "MAX_MESSAGE",
    "AuthenticationError",
    "ConnectionClosedError",
    "ProtocolError",
    "RealtimeClientError",
    "ServerUnreachableError",
]
