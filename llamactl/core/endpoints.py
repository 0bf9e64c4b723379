"""What crosses machines: HOST:PORT as llama.cpp's tools take it (`--rpc host:50052`; a name,
an IPv4 address or a bracketed IPv6 one, and a port from 1 to 65535), and the headers a load
balancer routes on (docs/scale.md)."""

from __future__ import annotations

import re

__all__ = ["RESPONSE_ID_HEADER", "SESSION_HEADER", "check_host_port"]

SESSION_HEADER = "X-Session-Id"  # a client's conversation key: its turns go to one replica
RESPONSE_ID_HEADER = "X-Response-Id"  # every /v1/responses answer names its id before its body

_HOST_PORT = re.compile(r"^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):(\d{1,5})$")


def check_host_port(value: str) -> str:
    """`value` itself, or a ValueError naming it."""
    match = _HOST_PORT.match(value)
    if not match or not 0 < int(match.group(2)) < 65536:
        raise ValueError(f"expected HOST:PORT, got {value!r}")
    return value
