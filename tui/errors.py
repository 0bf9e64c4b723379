"""Typed errors of the TUI and its realtime client; each message is meant for the screen."""

from __future__ import annotations

from llamactl.engine.errors import LlamactlError


class TuiError(LlamactlError):
    """Base of every error the TUI shows instead of a traceback."""


class ServerUnreachableError(TuiError):
    """Nothing answers at the URL (refused, timed out, DNS)."""


class AuthenticationError(TuiError):
    """The server refused the API key (HTTP 401 at the websocket handshake)."""


class ConnectionClosedError(TuiError):
    """The websocket closed while the session was in use."""


class LocalServerError(TuiError):
    """The in-process server could not start (model missing, load failure)."""
