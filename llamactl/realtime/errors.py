"""Errors of the Realtime protocol: a refused client event, and a client's failures.

`ProtocolError` is what the protocol's validators raise (it is deliberately not a
`ValueError`, so pydantic lets the first one through unchanged instead of collecting
every refusal); the server turns it into an `error` event and the socket stays open. The
client errors are meant for a screen or a terminal: each message says what to do.
"""

from __future__ import annotations

from typing import Any

from llamactl.engine.errors import LlamactlError

__all__ = [
    "MAX_MESSAGE",
    "AuthenticationError",
    "ConnectionClosedError",
    "ProtocolError",
    "RealtimeClientError",
    "ServerUnreachableError",
]

MAX_MESSAGE = 1024  # messages quote client values; a long one is cut, never echoed whole


def _cut(text: str | None) -> str | None:
    if text is None or len(text) <= MAX_MESSAGE:
        return text
    return text[: MAX_MESSAGE - 3] + "..."


class ProtocolError(Exception):
    """A client event we refuse; becomes an `error` event and the socket stays open."""

    def __init__(
        self,
        message: str,
        *,
        code: str = "invalid_value",
        param: str | None = None,
        type_: str = "invalid_request_error",
    ) -> None:
        message = _cut(message) or ""
        super().__init__(message)
        self.message = message
        self.code = code
        self.param = _cut(param)
        self.type = type_

    def to_event(self, event_id: str | None) -> dict[str, Any]:
        """The `error` server event (the id is the refused client event's, if it had one)."""
        from .protocol import error_event

        return error_event(
            self.message, type_=self.type, code=self.code, param=self.param, event_id=event_id
        )


class RealtimeClientError(LlamactlError):
    """Base of the realtime client's failures."""


class ServerUnreachableError(RealtimeClientError):
    """Nothing answers at the URL (refused, timed out, DNS), or it is not a llamactl server."""


class AuthenticationError(RealtimeClientError):
    """The server refused the API key (HTTP 401/403 at the websocket handshake)."""


class ConnectionClosedError(RealtimeClientError):
    """The websocket closed while the session was in use."""
