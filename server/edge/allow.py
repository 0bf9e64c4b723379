"""The `Allow` header of a 405, which HTTP requires: every method some route answers at the
path, not only the first route's (each path here is served by one route per method)."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from starlette.routing import Match

__all__ = ["allowed_methods"]

_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


def allowed_methods(scope: MutableMapping[str, Any], routes: Any) -> str:
    """Ask the routes, method by method, whether they would take this request: the router
    matches routes of included routers itself, so the probe needs none of its internals."""
    allowed = []
    for method in _METHODS:
        probe = {**scope, "type": "http", "method": method}
        if any(route.matches(dict(probe))[0] is Match.FULL for route in routes):
            allowed.append(method)
    return ", ".join(allowed)
