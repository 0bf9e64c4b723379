"""The one place uvicorn's options are chosen, for `llamactl serve`, the TUI's in-process
server and the tests' servers alike, so that all of them have the same bounds.

`ws_max_size` is the largest websocket message accepted (uvicorn's default is 16 MiB): it must
admit the documented 15 MiB realtime `input_audio_buffer.append` (about 20 MiB once base64 and
JSON), and it is above the realtime handler's own event limit so that an oversized event gets
that handler's clear error rather than a bare close 1009.
"""

from __future__ import annotations

from typing import Any

from llamactl.config import Settings

from .body import MiB

__all__ = ["WS_MAX_SIZE", "uvicorn_options"]

WS_MAX_SIZE = 32 * MiB


def uvicorn_options(settings: Settings, **overrides: Any) -> dict[str, Any]:
    """Keyword arguments for `uvicorn.Config(app, ...)`: the address from `settings`, the
    edge bounds, and `overrides` (the caller's port, logging, grace period) on top."""
    options: dict[str, Any] = {
        "host": settings.host,
        "port": settings.port,
        "lifespan": "on",
        "ws_max_size": WS_MAX_SIZE,
        "timeout_keep_alive": 5,  # idle keep-alive connections are closed after 5 s
        "timeout_graceful_shutdown": 5,
    }
    options.update(overrides)
    return options
