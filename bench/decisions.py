"""Decision-model figures: `/v1/systemone` throughput with prefix sharing on and off, and
conversion speed.

    python bench/decisions.py [--seconds 5] [--threads 2] [--width 1024] [--hidden 2048]

1. Requests per second for a 5-question `/v1/systemone` request on tiny 2-layer converted
   models `--width` wide (lfm2-d1: label logits; kev: a trunk-only copy plus the numpy
   pointer head), served by `llamactl serve` with its default 4 slots, one client at a time
   and 4 at once, with the shared prompt prefix decoded once (the default) and with every
   prompt decoded whole. At the tests' width (64) HTTP and Python dominate and sharing shows
   little; at 1024 the decode does.
2. Conversion MB/s (GGUF bytes written per second) of a bf16 lfm2-d1 checkpoint widened to
   `--hidden`, to f16 and to q8_0, best of 3.

Checkpoints are synthesized (llamactl.converters.examples); nothing is downloaded.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from llamactl.converters import convert  # noqa: E402
from llamactl.converters import examples as sc  # noqa: E402
from serverkit import run_server  # noqa: E402

REQUEST = {
    "state": {
        "ticket": "I was charged twice for order 1182 and nobody answers my emails.",
        "customer": {"name": "Bob", "plan": "pro", "since": 2019},
    },
    "questions": {
        "route": {
            "type": "choice",
            "instructions": "Which team should handle the ticket?",
            "criteria": {"billing": "Payments, refunds", "shipping": None, "technical": "Bugs"},
        },
        "urgency": {
            "type": "score",
            "instructions": "How urgent is it?",
            "criteria": ["can wait", "this week", "today", "right now"],
        },
        "angry": {"type": "noul", "instructions": "Is the customer angry?"},
        "refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"},
        "tone": {
            "type": "choice",
            "instructions": "Which tone should the answer take?",
            "criteria": {"formal": None, "friendly": None, "apologetic": None},
        },
    },
}


def requests_per_second(url: str, seconds: float, clients: int) -> tuple[float, float]:
    """(requests/s, mean latency ms) over `seconds` with `clients` concurrent clients."""
    deadline = time.perf_counter() + seconds
    latencies: list[float] = []

    def client() -> None:
        with httpx.Client(timeout=120) as http:
            while time.perf_counter() < deadline:
                t0 = time.perf_counter()
                r = http.post(url + "/v1/systemone", json=REQUEST)
                r.raise_for_status()
                latencies.append(time.perf_counter() - t0)

    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        for f in [pool.submit(client) for _ in range(clients)]:
            f.result()
    elapsed = time.perf_counter() - start
    return len(latencies) / elapsed, 1000 * sum(latencies) / max(len(latencies), 1)


def bench_serving(model: Path, seconds: float, threads: int) -> list[dict]:
    rows = []
    with run_server(model=str(model), threads=threads, metrics=True) as live:
        engine = live.state.decisions
        shared = httpx.post(live.url + "/v1/systemone", json=REQUEST, timeout=120).json()
        tokens = shared["usage"]["input_tokens"]
        for share in (True, False):
            engine.config = dataclasses.replace(engine.config, share_prefix=share)
            for clients in (1, 4):
                rps, ms = requests_per_second(live.url, seconds, clients)
                rows.append(
                    {
                        "model": model.stem,
                        "sharing": "on" if share else "off",
                        "clients": clients,
                        "req_per_s": round(rps, 1),
                        "latency_ms": round(ms, 1),
                        "prompt_tokens": tokens,
                    }
                )
    return rows


def served_models(work: Path, width: int) -> list[Path]:
    saved = sc.HIDDEN
    sc.HIDDEN = width
    try:
        base = sc.build("qwen35-base", work / "base")
        d1 = convert(sc.build("lfm2-d1", work / "d1"), work / "lfm2-d1.gguf")
        kev = convert(sc.build("kev", work / "kev", base=base), work / "kev.gguf", base=base)
    finally:
        sc.HIDDEN = saved
    return [d1.outfile, kev.outfile]


def bench_conversion(work: Path, hidden: int) -> list[dict]:
    saved = sc.HIDDEN
    sc.HIDDEN = hidden  # the builders read it when they run
    try:
        src = sc.build("lfm2-d1", work / f"d1-h{hidden}", bf16=True)
    finally:
        sc.HIDDEN = saved
    rows = []
    for outtype in ("f16", "q8_0"):
        best = None
        for _ in range(3):
            t0 = time.perf_counter()
            result = convert(src, work / f"d1-{outtype}.gguf", outtype=outtype)
            dt = time.perf_counter() - t0
            best = dt if best is None else min(best, dt)
        size = result.written.nbytes
        rows.append(
            {
                "convert": f"lfm2-d1 bf16 -> {outtype}",
                "hidden": hidden,
                "MB": round(size / 1e6, 1),
                "seconds": round(best, 3),
                "MB_per_s": round(size / 1e6 / best, 1),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="per measurement")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--width", type=int, default=1024, help="width of the served models")
    parser.add_argument("--hidden", type=int, default=2048, help="width of the converted model")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="llamactl-bench-") as tmp:
        work = Path(tmp)
        os.environ["XDG_CACHE_HOME"] = str(work / "cache")  # trunk copies stay in here
        models = served_models(work, args.width)
        serving = [row for m in models for row in bench_serving(m, args.seconds, args.threads)]
        conversion = bench_conversion(work, args.hidden)
    if args.json:
        print(json.dumps({"serving": serving, "conversion": conversion}, indent=2))
        return
    print(f"5-question /v1/systemone, 4 slots, models {args.width} wide")
    print(f"{'model':<10}{'sharing':>8}{'clients':>8}{'req/s':>8}{'ms':>8}{'tokens':>8}")
    for r in serving:
        print(
            f"{r['model']:<10}{r['sharing']:>8}{r['clients']:>8}{r['req_per_s']:>8}"
            f"{r['latency_ms']:>8}{r['prompt_tokens']:>8}"
        )
    print("\nconversion (best of 3)")
    for r in conversion:
        print(f"{r['convert']:<24} {r['MB']:>7} MB {r['seconds']:>7} s {r['MB_per_s']:>8} MB/s")


if __name__ == "__main__":
    main()
