"""The installed llamactl's version, as the server reports it (OpenAPI, `/props`)."""

from __future__ import annotations

from llamactl import installed_version

__all__ = ["server_version"]

server_version = installed_version
