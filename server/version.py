"""The installed llamactl's version, as the server reports it (OpenAPI, `/props`)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

__all__ = ["server_version"]


def server_version() -> str:
    try:
        return version("llamactl")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0.0.0"
