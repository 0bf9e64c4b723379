"""Which names and addresses are this machine's own: the test behind the Host check, the
default CORS origins and "is the server bound to loopback"."""

from __future__ import annotations

import ipaddress

__all__ = ["is_loopback_address", "is_loopback_name", "split_authority"]


def split_authority(authority: str) -> tuple[str, int | None] | None:
    """`host[:port]` or `[v6][:port]` as (lower-case host without brackets, port); None when
    it is not a well-formed authority."""
    text = authority.strip().lower()
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            return None
        host, rest = text[1:end], text[end + 1 :]
        if rest and not rest.startswith(":"):
            return None
        port_text = rest[1:] if rest else None
    else:
        host, sep, port_text = text.partition(":")
        if ":" in port_text:  # a bare IPv6 address is not an authority
            return None
        port_text = port_text if sep else None
    if not host:
        return None
    if port_text is None:
        return host, None
    if not port_text.isdigit() or int(port_text) > 65535:
        return None
    return host, int(port_text)


def is_loopback_address(host: str) -> bool:
    """127.0.0.0/8 or ::1, written as an IP address."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_loopback_name(host: str) -> bool:
    """`localhost` (a trailing dot allowed) or a loopback IP address: names that no DNS
    answer can make point elsewhere, so a rebinding page cannot use them."""
    name = host.lower().removesuffix(".")
    return name == "localhost" or is_loopback_address(name)
