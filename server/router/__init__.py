"""Router mode: one server in front of many models, each served by its own child process.

`llamactl serve --models-dir DIR` / `--models-preset FILE` starts `create_router_app`: it loads
no model itself; it starts a `llamactl serve` child on a private loopback port for a model
on its first request (keyed with a secret only the router knows), proxies HTTP, SSE and
websockets to it, and unloads children that are least recently used or idle. A crash in one
child never takes down the router.
"""

from __future__ import annotations

from .app import create_router_app

__all__ = ["create_router_app"]
