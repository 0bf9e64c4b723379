"""The Host check (`--allowed-hosts`), the defence against DNS rebinding.

A page on evil.example can make its own name resolve to 127.0.0.1 and then call the server
"same-origin", out of CORS's reach; its requests still say `Host: evil.example`. So a server
bound to a loopback address answers only requests whose Host is a loopback name (localhost,
127.x.x.x, [::1], any port) or an --allowed-hosts entry. Bound to another address it checks
only when --allowed-hosts is given (then loopback names and the entries); `*` turns the check
off. A request without Host (HTTP/1.0; browsers always send one) is not checked.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from llamactl.engine.errors import ConfigError

from .asgi import ASGIApp, Receive, Scope, Send, header, refuse
from .loopback import is_loopback_name, split_authority

__all__ = ["HostCheckMiddleware", "HostPolicy", "is_loopback_bind"]

log = logging.getLogger("llamactl.server")

ANY = "*"


def is_loopback_bind(host: str) -> bool:
    """Does listening on `host` (the --host value) reach this machine only?"""
    return is_loopback_name(host.strip().removeprefix("[").removesuffix("]"))


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
        self.loopback_bind = is_loopback_bind(bind_host)
        self.enforced = ANY not in allowed and (self.loopback_bind or bool(self.names))

    def allows(self, host_header: str) -> bool:
        if not self.enforced or not host_header:
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
        where = "a loopback address" if self.loopback_bind else "this address"
        return f"Host {host_header!r} is not allowed: the server on {where} answers {answers}"


class HostCheckMiddleware:
    def __init__(self, app: ASGIApp, policy: HostPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and self.policy.enforced:
            host = header(scope, b"host")
            if not self.policy.allows(host):
                log.info("%s %s: Host %r refused", scope.get("method", "WS"), scope["path"], host)
                await refuse(scope, send, 403, self.policy.refusal(host), "permission_error")
                return
        await self.app(scope, receive, send)
