"""Typed errors of the TUI; each message is meant for the screen. The realtime client's
own failures (unreachable server, refused key, closed socket) are `llamactl.realtime.errors`."""

from __future__ import annotations

from llamactl.engine.errors import LlamactlError

__all__ = ["LocalServerError", "TuiError"]


class TuiError(LlamactlError):
    """Base of the errors the TUI itself raises."""


class LocalServerError(TuiError):
    """The in-process server could not start (model missing, load failure)."""
