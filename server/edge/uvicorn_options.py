"""The one place uvicorn's options are chosen, for `llamactl serve`, the TUI's in-process
server and the tests' servers alike, so that all of them have the same bounds.

The HTTP parser is h11, whose `h11_max_incomplete_event_size` bounds the request line and
headers (httptools, uvicorn's other choice, took 2 MB of headers without complaint); parsing is
a negligible part of serving a model. The protocol is uvicorn's h11 one with the connection
bounds of `connections.py` (`--header-timeout`, `--max-connections`); choosing it raises the
process's file descriptor limit, so every server started through here has that too.

`ws_max_size` is the largest websocket message accepted (uvicorn's default is 16 MiB): it must
admit the documented 15 MiB realtime `input_audio_buffer.append` (about 20 MiB once base64 and
JSON), and it is above the realtime handler's own event limit so that an oversized event gets
that handler's clear error rather than a bare close 1009.
"""

from __future__ import annotations

from typing import Any

from llamactl.config import Settings

from .body import MiB
from .connections import edge_protocol

__all__ = ["MAX_HEAD_SIZE", "WS_MAX_SIZE", "uvicorn_options"]

MAX_HEAD_SIZE = 64 * 1024  # request line and headers; big cookie jars on localhost fit
WS_MAX_SIZE = 32 * MiB


def uvicorn_options(settings: Settings, **overrides: Any) -> dict[str, Any]:
    """Keyword arguments for `uvicorn.Config(app, ...)`: the address from `settings`, the
    edge bounds, and `overrides` (the caller's port, logging, grace period) on top."""
    options: dict[str, Any] = {
        "host": settings.host,
        "port": settings.port,
        "lifespan": "on",
        "http": edge_protocol(settings.header_timeout, settings.max_connections),
        "h11_max_incomplete_event_size": MAX_HEAD_SIZE,
        "ws_max_size": WS_MAX_SIZE,
        "timeout_keep_alive": 5,  # idle keep-alive connections are closed after 5 s
        "timeout_graceful_shutdown": 5,
        # X-Forwarded-For is not believed (uvicorn believes it from 127.0.0.1 by default): any
        # local process could otherwise write another client address into the logs
        "proxy_headers": False,
    }
    options.update(overrides)
    return options
