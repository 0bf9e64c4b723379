#!/usr/bin/env python3
"""An HAProxy configuration for N `llamactl serve` replicas (docs/scale.md explains each rule).

    python scripts/haproxy_config.py 10.0.0.11:8080 10.0.0.12:8080 [--bind :8080] > llamactl.cfg

What it routes, in order:
- a Responses request naming `previous_response_id` goes to the replica that stored that
  response (a stick table filled from each response's `X-Response-Id` header): only that
  replica can continue it;
- a request with an `X-Session-Id` header goes where that conversation went before
  (consistent hashing): its prompt cache is warm there;
- everything else to the replica with the fewest requests in flight (`leastconn`).

Websockets (`/v1/realtime`) stay on the replica that accepted them for their whole life.
Health checks read `/health`, which answers 503 while a replica loads or drains, so a
draining replica finishes its streams while new requests go elsewhere. A request is retried
on another replica only when it never reached one (connection refused): a generation that
started is never run twice.
"""

from __future__ import annotations

import argparse
import sys

from llamactl.core.endpoints import RESPONSE_ID_HEADER, SESSION_HEADER, check_host_port

__all__ = ["haproxy_config"]


def haproxy_config(
    replicas: list[str],
    *,
    bind: str = ":8080",
    check_interval: str = "1s",
    stream_timeout: str = "10m",
    tunnel_timeout: str = "1h",
    response_ids: int = 1_000_000,
    response_id_ttl: str = "24h",
    affinity: bool = True,
) -> str:
    """The configuration text for `replicas` (HOST:PORT each), listening on `bind`.

    `affinity=False` leaves `X-Session-Id` unread (every request but a chained Responses turn
    goes by `leastconn`): the baseline bench/scale.py compares affinity with."""
    if not replicas:
        raise ValueError("at least one replica is needed")
    for address in replicas:
        check_host_port(address)
    names = [f"r{i}" for i in range(1, len(replicas) + 1)]
    # the same explicit ids in both backends: the stick table stores a server's id, and a
    # response stored from `conversations` is matched in `stateless`
    pairs = list(enumerate(zip(names, replicas, strict=True), start=1))
    servers = "\n".join(f"    server {name} {address} id {i}" for i, (name, address) in pairs)
    tracked = "\n".join(
        f"    server {name} {address} id {i} track stateless/{name}" for i, (name, address) in pairs
    )
    conversation_rule = (
        "    # a conversation keeps to one replica: its prompt cache is there\n"
        f"    use_backend conversations if {{ req.hdr({SESSION_HEADER}) -m found }}\n"
        if affinity
        else ""
    )
    return f"""\
# HAProxy in front of {len(replicas)} llamactl replicas: made by scripts/haproxy_config.py,
# explained in docs/scale.md. HAProxy 2.4 or newer (json_query).
global
    maxconn 4096

defaults
    mode http
    option http-keep-alive
    timeout connect 5s
    timeout http-request 60s
    timeout queue 60s
    # a streamed answer may take minutes; a realtime websocket lives as long as its session
    timeout client {stream_timeout}
    timeout server {stream_timeout}
    timeout tunnel {tunnel_timeout}
    # retried elsewhere only when the request was not started: the connection failed, or a
    # draining replica answered 503 on a reused connection; a started generation never runs twice
    retries 2
    retry-on conn-failure 503
    option redispatch 1

frontend llamactl
    bind {bind}
    # read a Responses body for its previous_response_id (bodies are small: the prompt)
    option http-buffer-request
    http-request set-var(txn.previous) req.body,json_query('$.previous_response_id') \
if {{ method POST }} {{ path_end /responses }}
    # a chained Responses turn must reach the replica that stored the response it names
    use_backend stateless if {{ var(txn.previous) -m found }}
{conversation_rule}    default_backend stateless

backend stateless
    balance leastconn
    option httpchk
    http-check send meth GET uri /health
    http-check expect status 200
    default-server check inter {check_interval} fall 2 rise 2
    # response id -> the replica that answered (and stored) it
    stick-table type string len 64 size {response_ids} expire {response_id_ttl}
    stick match var(txn.previous)
    stick store-response res.hdr({RESPONSE_ID_HEADER})
{servers}

backend conversations
    balance hdr({SESSION_HEADER})
    hash-type consistent
    stick store-response res.hdr({RESPONSE_ID_HEADER}) table stateless
{tracked}
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("replicas", nargs="+", metavar="HOST:PORT", help="the llamactl replicas")
    ap.add_argument("--bind", default=":8080", help="where HAProxy listens (default :8080)")
    ap.add_argument("--check-interval", default="1s", help="health-check period (default 1s)")
    ap.add_argument(
        "--no-affinity", action="store_true", help="ignore X-Session-Id (a baseline to compare)"
    )
    args = ap.parse_args(argv)
    try:
        text = haproxy_config(
            args.replicas,
            bind=args.bind,
            check_interval=args.check_interval,
            affinity=not args.no_affinity,
        )
    except ValueError as exc:
        print(f"haproxy_config: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
