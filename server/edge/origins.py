"""Which web origins may call the server (`--cors-origins`).

A browser sends `Origin` with every cross-origin request and with same-origin POSTs; other
clients (curl, the SDKs) send none and are not affected. The default, `localhost`, admits
pages served from this machine (http(s)://localhost, 127.0.0.0/8 and [::1], any port) and the
server's own origin (Swagger UI at /docs); `*` admits every origin, `null` included; other
entries are exact origins such as `https://app.example.com`.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlsplit

from llamactl import ConfigError

from .loopback import is_loopback_name, split_authority

__all__ = ["ANY", "LOOPBACK", "OriginPolicy", "normalize_origin"]

ANY = "*"
LOOPBACK = "localhost"  # llama-server's spelling for "local origins only"
_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


def _parts(origin: str) -> tuple[str, str, int] | None:
    """(scheme, host, port with the scheme's default filled in); None if not an origin."""
    try:
        url = urlsplit(origin.strip())
        port = url.port
    except ValueError:
        return None
    scheme, host = url.scheme.lower(), (url.hostname or "")
    if scheme not in _DEFAULT_PORTS or not host or url.username is not None:
        return None
    if url.path not in ("", "/") or url.query or url.fragment:
        return None
    return scheme, host, port if port is not None else _DEFAULT_PORTS[scheme]


def normalize_origin(origin: str) -> str | None:
    """`scheme://host[:port]` in lower case without the default port; None if malformed."""
    parts = _parts(origin)
    if parts is None:
        return None
    scheme, host, port = parts
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown}" if port == _DEFAULT_PORTS[scheme] else f"{scheme}://{shown}:{port}"


class OriginPolicy:
    """The `cors_origins` setting, checked once at start (a typo is a ConfigError)."""

    def __init__(self, entries: Sequence[str]) -> None:
        self.any = ANY in entries
        self.loopback = LOOPBACK in entries
        self.null = "null" in entries
        self.exact: set[str] = set()
        for entry in entries:
            if entry in (ANY, LOOPBACK, "null"):
                continue
            normal = normalize_origin(entry)
            if normal is None:
                raise ConfigError(
                    f"cors_origins: {entry!r} is not an origin: expected '*', 'localhost', "
                    "'null' or scheme://host[:port] such as https://app.example.com"
                )
            self.exact.add(normal)

    def allows(self, origin: str, host_header: str) -> bool:
        """May a page of `origin` call us? `host_header` is the request's `Host`, which makes
        a same-origin request recognisable whatever name the server is reached by."""
        if self.any:
            return True
        if origin.strip() == "null":
            return self.null
        parts = _parts(origin)
        if parts is None:
            return False
        scheme, host, port = parts
        if self.loopback and is_loopback_name(host):
            return True
        if normalize_origin(origin) in self.exact:
            return True
        target = split_authority(host_header)
        if target is None:
            return False
        target_host, target_port = target
        return host == target_host and port == (target_port or _DEFAULT_PORTS[scheme])
