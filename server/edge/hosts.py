"""The Host check (`--allowed-hosts`), the defence against DNS rebinding.

A page on evil.example can make its own name resolve to 127.0.0.1 and then call the server
"same-origin", out of CORS's reach; its requests still say `Host: evil.example`. So a server
bound to a loopback address answers only requests whose Host is a loopback name (localhost,
127.x.x.x, [::1], any port) or an --allowed-hosts entry. Bound to another address (0.0.0.0)
the same holds for connections that arrive on a loopback address (the rebinding page's), and
other connections are checked only when --allowed-hosts is given, since the server may be
reached by names it cannot know. `*` turns the check off. A request without Host (HTTP/1.0;
browsers always send one) is not checked.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from llamactl import ConfigError

from .asgi import ASGIApp, Receive, Scope, Send, header, refuse
from .listen import is_unix_socket_path, listen_addresses
from .loopback import is_loopback_address, is_loopback_name, split_authority

__all__ = ["HostCheckMiddleware", "HostPolicy", "is_loopback_bind"]

log = logging.getLogger("llamactl.server")

ANY = "*"


def is_loopback_bind(host: str) -> bool:
    """Does listening on `host` (the --host value: addresses and socket paths, comma
    separated) reach this machine only? A UNIX socket does."""
    return all(
        is_unix_socket_path(address) or is_loopback_name(address)
        for address in listen_addresses(host)
    )


class HostPolicy:
    """`allowed_hosts` entries are host names or addresses (a port, if written, is ignored)."""

    def __init__(self, bind_host: str, allowed: Sequence[str]) -> None:
        self.names: set[str] = set()
        for entry in allowed:
            if entry == ANY:
                continue
            parsed = split_authority(entry)
            if parsed is None:
                raise ConfigError(f"allowed_hosts: {entry!r} is not a host name or address")
            self.names.add(parsed[0].removesuffix("."))
        self.off = ANY in allowed
        self.loopback_bind = is_loopback_bind(bind_host)

    def applies(self, local_address: str) -> bool:
        """Is a connection that arrived on `local_address` (this end's IP) checked?"""
        if self.off:
            return False
        return self.loopback_bind or bool(self.names) or is_loopback_address(local_address)

    def allows(self, host_header: str, local_address: str) -> bool:
        if not host_header or not self.applies(local_address):
            return True
        parsed = split_authority(host_header)
        if parsed is None:
            return False
        name = parsed[0]
        return is_loopback_name(name) or name.removesuffix(".") in self.names

    def refusal(self, host_header: str) -> str:
        answers = "loopback names and --allowed-hosts entries"
        if not self.names:
            answers = "loopback names only (add others with --allowed-hosts)"
        return f"Host {host_header!r} is not allowed: this server answers {answers}"


class HostCheckMiddleware:
    def __init__(self, app: ASGIApp, policy: HostPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and not self.policy.off:
            host = header(scope, b"host")
            local = (scope.get("server") or ("", 0))[0] or ""
            if not self.policy.allows(host, local):
                log.info("%s %s: Host %r refused", scope.get("method", "WS"), scope["path"], host)
                await refuse(scope, send, 403, self.policy.refusal(host), "permission_error")
                return
        await self.app(scope, receive, send)
