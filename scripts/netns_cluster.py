#!/usr/bin/env python3
"""`llamactl serve` replicas, each in a network namespace of its own, behind HAProxy.

For the scale-out test and benchmark (tests/test_scale_haproxy.py, bench/scale.py), and to
try docs/scale.md's configuration on one machine:

    sudo python scripts/netns_cluster.py --replicas 3 -- --parallel 2 --threads 1

prints HAProxy's address and waits for Ctrl-C. Needs root, iproute2 and haproxy. Each replica
gets a veth pair (10.231.N.1 on this side, 10.231.N.2 in namespace N), so replicas and the
balancer talk over real interfaces with only those addresses, as on separate hosts.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from haproxy_config import haproxy_config  # noqa: E402

__all__ = ["Cluster", "ClusterError", "Replica", "cluster", "unavailable", "wait_healthy"]

PORT = 8080


class ClusterError(RuntimeError):
    """A replica or the balancer did not start; the message holds the end of its log."""


def unavailable() -> str | None:
    """Why a cluster cannot run here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "haproxy"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (scripts/install-system-deps.sh)"
    probe = f"llprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True)
    if made.returncode != 0:
        return f"ip netns does not work here: {made.stderr.decode().strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


@dataclass
class Replica:
    name: str
    namespace: str
    address: str
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return f"http://{self.address}:{PORT}"


@dataclass
class Cluster:
    url: str  # HAProxy's
    replicas: list[Replica]
    haproxy: subprocess.Popen[bytes]


def _sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ClusterError(f"{url} exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        time.sleep(0.2)
    raise ClusterError(f"{url} never became healthy:\n{log.read_text()[-3000:]}")


def _environment(root: Path) -> dict[str, str]:
    """This environment without settings variables, with XDG homes of the cluster's own."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LLAMACTL_", "LLAMA_ARG_", "LLAMA_API_KEY"))
    }
    for name in ("CONFIG", "DATA", "CACHE", "STATE"):
        env[f"XDG_{name}_HOME"] = str(root / name.lower())
    return env


@contextlib.contextmanager
def cluster(
    root: Path,
    *,
    replicas: int = 3,
    serve_args: tuple[str, ...] = ("--parallel", "2", "--threads", "1"),
    env: dict[str, str] | None = None,
    affinity: bool = True,
    check_interval: str = "200ms",
) -> Iterator[Cluster]:
    """Start `replicas` servers (`llamactl serve --metrics` plus `serve_args`) and HAProxy
    in front, under `root` (logs, config); everything is removed on exit."""
    tag = f"ll{os.getpid() % 100000}"
    environment = {**_environment(root), **(env or {})}
    namespaces: list[str] = []
    links: list[str] = []
    started: list[Replica] = []
    haproxy: subprocess.Popen[bytes] | None = None
    try:
        for i in range(1, replicas + 1):
            ns, host_end, ns_end = f"{tag}r{i}", f"{tag}h{i}", f"{tag}n{i}"
            _sh("ip", "netns", "add", ns)
            namespaces.append(ns)
            _sh("ip", "link", "add", host_end, "type", "veth", "peer", "name", ns_end)
            links.append(host_end)
            _sh("ip", "link", "set", ns_end, "netns", ns)
            _sh("ip", "addr", "add", f"10.231.{i}.1/24", "dev", host_end)
            _sh("ip", "link", "set", host_end, "up")
            _sh("ip", "-n", ns, "addr", "add", f"10.231.{i}.2/24", "dev", ns_end)
            _sh("ip", "-n", ns, "link", "set", ns_end, "up")
            _sh("ip", "-n", ns, "link", "set", "lo", "up")
            address = f"10.231.{i}.2"
            log = root / f"r{i}.log"
            with log.open("wb") as err:
                # `ip netns exec` execs the server: signals sent to proc reach it
                proc = subprocess.Popen(
                    ["ip", "netns", "exec", ns, sys.executable, "-m", "llamactl", "serve"]
                    + ["--host", address, "--port", str(PORT), "--metrics", *serve_args],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=err,
                    env=environment,
                )
            started.append(Replica(f"r{i}", ns, address, proc, log))
        for r in started:
            wait_healthy(r.url, r.proc, r.log)
        port = _free_port()
        config = root / "haproxy.cfg"
        addresses = [f"{r.address}:{PORT}" for r in started]
        config.write_text(
            haproxy_config(
                addresses,
                bind=f"127.0.0.1:{port}",
                check_interval=check_interval,
                affinity=affinity,
            )
        )
        log = root / "haproxy.log"
        with log.open("wb") as err:
            haproxy = subprocess.Popen(
                ["haproxy", "-db", "-f", str(config)], stdout=err, stderr=err, env=environment
            )
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, haproxy, log, timeout=30)
        yield Cluster(url, started, haproxy)
    finally:
        for proc in [r.proc for r in started] + ([haproxy] if haproxy else []):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for link in links:
            subprocess.run(["ip", "link", "del", link], capture_output=True)
        for ns in namespaces:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--no-affinity", action="store_true", help="leastconn for every request")
    ap.add_argument("serve_args", nargs=argparse.REMAINDER, help="-- then `serve` flags")
    args = ap.parse_args()
    reason = unavailable()
    if reason:
        print(f"netns_cluster: {reason}", file=sys.stderr)
        return 1
    serve_args = tuple(a for a in args.serve_args if a != "--") or ("--parallel", "2")
    root = Path(os.environ.get("TMPDIR", "/tmp")) / f"llamactl-cluster-{os.getpid()}"
    root.mkdir(parents=True, exist_ok=True)
    try:
        with cluster(
            root, replicas=args.replicas, serve_args=serve_args, affinity=not args.no_affinity
        ) as c:
            print(f"HAProxy at {c.url}; replicas at " + ", ".join(r.url for r in c.replicas))
            print(f"logs and config in {root}; Ctrl-C stops everything", flush=True)
            # blocked only now: the servers started above must keep their own signals
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
            signal.sigwait({signal.SIGINT, signal.SIGTERM})
    except ClusterError as exc:
        print(f"netns_cluster: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
