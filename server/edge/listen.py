"""Where the server listens: llama-server's `--host a,b,...` (TCP addresses and UNIX socket
paths ending in `.sock`), bound here so one process serves them all.

uvicorn binds one host itself; for anything else it is handed sockets we bind. With several
TCP addresses an IPv6 one binds IPv6 only (llama-server's rule), so `127.0.0.1,::1` does
not clash with itself.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
from pathlib import Path

from llamactl import CannotListenError, ConfigError

__all__ = [
    "bind_sockets",
    "display_urls",
    "is_unix_socket_path",
    "listen_addresses",
    "remove_socket_files",
]


def listen_addresses(host: str) -> list[str]:
    """The `--host` value as its addresses, in order, brackets off IPv6 ones."""
    out = []
    for part in host.split(","):
        part = part.strip()
        if part:
            out.append(part if is_unix_socket_path(part) else part.strip("[]"))
    if not out:
        raise ConfigError("host: no address given")
    return out


def is_unix_socket_path(address: str) -> bool:
    return address.endswith(".sock")


def display_urls(host: str, port: int) -> list[str]:
    urls = []
    for address in listen_addresses(host):
        if is_unix_socket_path(address):
            urls.append(f"unix:{address}")
        else:
            shown = f"[{address}]" if ":" in address else address
            urls.append(f"http://{shown}:{port}")
    return urls


def bind_sockets(host: str, port: int) -> list[socket.socket]:
    """A bound socket per address; CannotListenError (all closed) when one cannot bind."""
    addresses = listen_addresses(host)
    several = len(addresses) > 1
    bound: list[socket.socket] = []
    try:
        for address in addresses:
            if is_unix_socket_path(address):
                bound.append(_bind_unix(Path(address)))
            else:
                bound.append(_bind_tcp(address, port, v6_only=several))
    except BaseException:
        for sock in bound:
            sock.close()
        if bound:
            remove_socket_files(",".join(addresses[: len(bound)]))
        raise
    return bound


def remove_socket_files(host: str) -> None:
    """After serving: the UNIX socket files of `host` go (uvicorn closes the sockets but
    leaves their files)."""
    for address in listen_addresses(host):
        if is_unix_socket_path(address):
            with contextlib.suppress(OSError):
                if stat.S_ISSOCK(os.lstat(address).st_mode):
                    os.unlink(address)


def _bind_tcp(address: str, port: int, *, v6_only: bool) -> socket.socket:
    try:
        infos = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise CannotListenError(f"host {address!r}: {exc.strerror}") from None
    family, kind, proto, _, sockaddr = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1 if v6_only else 0)
        sock.bind(sockaddr)
    except OSError as exc:
        sock.close()
        raise CannotListenError(f"cannot listen on {address} port {port}: {exc.strerror}") from None
    sock.set_inheritable(True)
    return sock


def _bind_unix(path: Path) -> socket.socket:
    _remove_stale_socket(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
    except OSError as exc:
        sock.close()
        raise CannotListenError(f"cannot listen on {path}: {exc.strerror}") from None
    return sock


def _remove_stale_socket(path: Path) -> None:
    """A socket file left by a server that is gone is removed; a live one, or a file that is
    not a socket, is an error (never deleted)."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise CannotListenError(f"cannot listen on {path}: it exists and is not a socket")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except OSError:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return
    finally:
        probe.close()
    raise CannotListenError(f"cannot listen on {path}: another server is listening there")
