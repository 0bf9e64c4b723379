"""Multi-turn conversations through HAProxy: session affinity against plain leastconn.

Three `llamactl serve` replicas in network namespaces behind HAProxy (scripts/netns_cluster.py,
docs/scale.md's configuration), the same workload through each balancer setting, and once
with a single replica (-t 2: the whole machine) behind the same balancer, the warm-turn anchor:
  - N conversations of T turns, C at a time, each turn streamed, greedy, 16 tokens;
  - cached ratio: prompt tokens of turns 2+ served from the cache / all their prompt tokens;
  - p50 and p95 time to first token of turns 2+.

On one 2-core machine the replicas share the cores, so this reports what the balancer does
to the cache and to the latency of a warm turn, not throughput scaling (see docs/scale.md).
Rounds interleave the three setups; figures are medians [min-max] over rounds.

    sudo python bench/scale.py [--conversations 24] [--turns 4] [--concurrency 3] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import netns_cluster  # noqa: E402

SERVE_ARGS = ("--parallel", "2", "--threads", "1", "--temperature", "0")


def turn(url: str, messages: list[dict], session: str) -> tuple[float, int, int, str]:
    """One streamed turn: (time to first token, prompt tokens, cached tokens, answer)."""
    body = {
        "messages": messages,
        "max_tokens": 16,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    start = time.perf_counter()
    first = None
    text, usage = "", {}
    with httpx.stream(
        "POST",
        url + "/v1/chat/completions",
        json=body,
        headers={"X-Session-Id": session},
        timeout=300,
    ) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            for choice in chunk.get("choices", []):
                delta = choice.get("delta", {}).get("content")
                if delta:
                    first = first or time.perf_counter()
                    text += delta
            usage = chunk.get("usage") or usage
    ttft = (first or time.perf_counter()) - start
    return ttft, usage["prompt_tokens"], usage["prompt_tokens_details"]["cached_tokens"], text


def workload(url: str, args: argparse.Namespace, tag: str) -> dict[str, float]:
    def converse(n: int) -> list[tuple[float, int, int]]:
        messages = [{"role": "user", "content": f"Conversation {tag}-{n}: tell me about rivers."}]
        seen = []
        for t in range(args.turns):
            ttft, prompt, cached, answer = turn(url, messages, f"{tag}-{n}")
            seen.append((ttft, prompt, cached))
            messages += [
                {"role": "assistant", "content": answer},
                {"role": "user", "content": f"Tell me more, part {t + 2}."},
            ]
        return seen[1:]  # turns 2+

    with ThreadPoolExecutor(args.concurrency) as pool:
        later = [t for conv in pool.map(converse, range(args.conversations)) for t in conv]
    ttfts = sorted(t for t, _, _ in later)
    return {
        "cached": sum(c for _, _, c in later) / sum(p for _, p, _ in later),
        "p50_ms": 1000 * statistics.median(ttfts),
        "p95_ms": 1000 * ttfts[int(0.95 * (len(ttfts) - 1))],
    }


def summary(values: list[float], fmt: str) -> str:
    """median [min-max] over the rounds"""
    med = fmt.format(statistics.median(values))
    if len(values) == 1:
        return med
    return f"{med} [{fmt.format(min(values))}-{fmt.format(max(values))}]"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--conversations", type=int, default=24)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--concurrency", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    reason = netns_cluster.unavailable()
    if reason:
        print(f"bench/scale.py: {reason}", file=sys.stderr)
        return 1
    setups: dict[str, Callable[[Path], object]] = {
        "affinity": lambda root: netns_cluster.cluster(root, serve_args=SERVE_ARGS),
        "leastconn": lambda root: netns_cluster.cluster(
            root, serve_args=SERVE_ARGS, affinity=False
        ),
        "one server": lambda root: netns_cluster.cluster(
            root, replicas=1, serve_args=("--parallel", "2", "--threads", "2", "--temperature", "0")
        ),
    }
    results: dict[str, list[dict[str, float]]] = {k: [] for k in setups}
    for r in range(args.rounds):
        for name, make in setups.items():
            with tempfile.TemporaryDirectory() as tmp, make(Path(tmp)) as c:  # type: ignore[attr-defined]
                results[name].append(workload(c.url, args, f"r{r}"))
            print(f"round {r + 1}/{args.rounds}: {name} done", file=sys.stderr, flush=True)
    print(
        f"{args.conversations} conversations x {args.turns} turns, {args.concurrency} at a time, "
        f"3 replicas (--parallel 2 -t 1) on one machine; one server: -t 2; turns 2+ only; "
        f"{args.rounds} rounds interleaved: median [min-max]"
    )
    print(f"{'setup':12} {'cached ratio':22} {'p50 TTFT ms':22} {'p95 TTFT ms':22}")
    for name, rounds in results.items():
        cells = [
            summary([x["cached"] for x in rounds], "{:.2f}"),
            summary([x["p50_ms"] for x in rounds], "{:.0f}"),
            summary([x["p95_ms"] for x in rounds], "{:.0f}"),
        ]
        print(f"{name:12} " + " ".join(f"{c:22}" for c in cells))
    single = statistics.median(x["p50_ms"] for x in results["one server"])
    for name in ("affinity", "leastconn"):
        p50 = statistics.median(x["p50_ms"] for x in results[name])
        print(f"{name}: p50 TTFT of turns 2+ = {p50 / single:.2f}x the single server's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
