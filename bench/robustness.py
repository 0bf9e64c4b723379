"""How `llamactl serve` stands up to hostile clients: fuzzing, hand-made bad requests, a flood
of bad bodies, and a soak with memory sampled.

Starts one `llamactl serve` process (embedded SmolLM2, 4 slots of 256 tokens so any generated
case ends quickly) and runs, in order:

1. **fuzz**: every operation of docs/openapi.json, schemathesis-generated cases (valid and
   invalid), `--examples` per operation and mode: cases tried, 5xx answers, hangs (no answer
   within `--case-timeout`), and whether the process is still alive;
2. **hand-made**: the requests that used to crash, stall or 500 the server (eSpeak voice paths,
   WAV headers with rate 0 or 1, lone surrogates, NaN and 2^63 numbers, 50,000 messages...):
   each must be a 4xx;
3. **flood**: those bad bodies sent again and again by `--flood-clients` clients for
   `--flood-seconds` while `/health` is asked every 20 ms: its p50 / p99 / max latency;
4. **soak**: 32 mixed clients (chat, streams, completions, Anthropic, Responses) for
   `--soak-minutes`, RSS sampled every 10 s after a warm-up: start / middle / end and growth.

    pip install schemathesis   # for part 1 (the `bench` extra)
    python bench/robustness.py [--examples 25] [--flood-seconds 30] [--soak-minutes 30]

Targets (issue: hardening): 0 x 5xx, 0 hangs, /health p99 < 200 ms during the flood, RSS growth
< 2 % over a 30-minute soak after warm-up (the prompt cache is held to 32 MiB, so what grows is
what would leak). Run it alone: two cores are shared by everything.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import io
import json
import os
import random
import struct
import subprocess
import sys
import tempfile
import threading
import time
import wave
from pathlib import Path
from typing import Any

import httpx

from llamactl.layout import entry_point

ROOT = Path(__file__).resolve().parent.parent
HI = [{"role": "user", "content": "Hi"}]


# ---------------------------------------------------------------------------- the server


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`llamactl serve` in its own process. `args` replaces the default flags after the port;
    `checkout` runs another checkout's code (bench/hostile.py's before/after)."""

    def __init__(
        self,
        threads: int,
        args: list[str] | None = None,
        checkout: Path | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMACTL_")}
        env["LLAMACTL_CONFIG"] = os.devnull
        fd, log_path = tempfile.mkstemp(prefix="robustness-", suffix=".log")
        self.log_path = log_path
        launcher = entry_point()
        if checkout is not None:
            env["PYTHONPATH"] = str(checkout)
            launcher = [sys.executable, "-m", "llamactl"]
        cmd = [*launcher, "serve", "--port", str(self.port)]
        if args is None:
            args = ["--parallel", "4", "--ctx-size", "1024", "--threads", str(threads)]
            args += ["--cache-ram", "32", "--metrics", "--log-level", "warning"]
        cmd += args
        self.proc = subprocess.Popen(cmd, env=env, stderr=fd, stdout=subprocess.DEVNULL, cwd=cwd)
        os.close(fd)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    self.model = httpx.get(self.url + "/v1/models").json()["data"][0]["id"]
                    return
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None:
                raise SystemExit(f"the server exited: see {self.log_path}")
            time.sleep(0.2)
        raise SystemExit("the server never became healthy")

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def stop(self) -> int:
        self.proc.terminate()
        return self.proc.wait(60)


# ---------------------------------------------------------------------------------- fuzz


def fuzz(server: Server, examples: int, case_timeout: float) -> dict[str, Any]:
    try:
        import schemathesis
        from hypothesis import HealthCheck, given, settings
        from hypothesis.errors import Unsatisfiable
        from schemathesis.generation import GenerationMode
    except ImportError:
        print("  (schemathesis is not installed: pip install schemathesis)")
        return {"skipped": True}
    schema = schemathesis.openapi.from_path(str(ROOT / "docs" / "openapi.json"))
    tally: dict[str, Any] = {"tried": 0, "5xx": [], "hangs": []}

    def cases_of(op, mode):
        label = f"{op.method.upper()} {op.path}"

        @settings(
            max_examples=examples,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=op.as_strategy(generation_mode=mode))
        def run(case) -> None:
            tally["tried"] += 1
            try:
                response = case.call(base_url=server.url, timeout=case_timeout)
            except Exception as exc:  # a timeout or a dropped connection
                tally["hangs"].append(f"{label}: {type(exc).__name__}")
                return
            if response.status_code >= 500 and response.status_code not in (501, 503):
                tally["5xx"].append(f"{label}: {response.status_code} {response.text[:160]}")

        return run

    for result in schema.get_all_operations():
        op = result.ok()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            # Unsatisfiable: no invalid request exists (an operation without inputs)
            with contextlib.suppress(Unsatisfiable):
                cases_of(op, mode)()
        print(f"  {op.method.upper():6} {op.path:40} cases so far {tally['tried']}")
    return {**tally, "alive": server.alive}


# ----------------------------------------------------------------------------- hand-made


def wav_with_rate(rate: int, frames: int = 4000) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(max(rate, 1))
        w.writeframes(b"\0\0" * frames)
    data = bytearray(out.getvalue())
    if rate == 0:  # the wave module refuses to write it: patch the header
        struct.pack_into("<I", data, 24, 0)
        struct.pack_into("<I", data, 28, 0)
    return bytes(data)


def bad_requests(model: str, n_vocab: int) -> list[tuple[str, str, dict[str, Any]]]:
    """(label, path, httpx request kwargs) of requests that must each be a 4xx."""
    many = [{"role": "user", "content": f"message {i}"} for i in range(50000)]
    bias = {str(i): 1.0 for i in range(n_vocab + 1000)}
    reqs: list[tuple[str, str, dict[str, Any]]] = []
    for voice in ["../" * 12 + "etc/passwd", "../" * 16 + "bin/ls", "en-us+" + "a" * 60, "/etc"]:
        body = {"model": "tts-1", "input": "hello", "voice": voice}
        reqs.append((f"speech voice {voice[:20]}", "/v1/audio/speech", {"json": body}))
        reqs.append((f"tts voice {voice[:20]}", "/tts", {"json": {"input": "hi", "voice": voice}}))
    for rate in (0, 1):
        files = {"file": ("a.wav", wav_with_rate(rate), "audio/wav")}
        form = {"files": files, "data": {"model": "whisper-1"}}
        reqs.append((f"wav rate {rate}", "/v1/audio/transcriptions", form))
    raw = b'{"messages": [{"role": "user", "content": "\\ud800"}]}'
    headers = {"content-type": "application/json"}
    reqs.append(("lone surrogate", "/v1/chat/completions", {"content": raw, "headers": headers}))
    nan = b'{"messages": [{"role": "user", "content": "x"}], "repeat_penalty": NaN}'
    reqs.append(
        ("NaN repeat_penalty", "/v1/chat/completions", {"content": nan, "headers": headers})
    )
    for field in ("top_k", "seed"):
        body = {"messages": HI, field: 2**70}
        reqs.append((f"{field} 2^70", "/v1/chat/completions", {"json": body}))
    body = {"model": model, "max_tokens": 2**63, "messages": HI}
    reqs.append(("anthropic max_tokens 2^63", "/v1/messages", {"json": body}))
    reqs.append(("role alien", "/v1/chat/completions", {"json": {"messages": [{"role": "alien"}]}}))
    reqs += flood_bodies(n_vocab, many, bias)
    return reqs


def flood_bodies(n_vocab: int, many=None, bias=None) -> list[tuple[str, str, dict[str, Any]]]:
    many = many or [{"role": "user", "content": f"message {i}"} for i in range(50000)]
    bias = bias or {str(i): 1.0 for i in range(n_vocab + 1000)}
    chat = "/v1/chat/completions"
    return [
        ("50,000 messages", chat, {"content": json.dumps({"messages": many}).encode()}),
        (
            "200,000 messages",
            chat,
            {"content": json.dumps({"messages": [{"role": "user", "content": "m"}] * 200000})},
        ),
        ("2 MB stop list", chat, {"content": json.dumps({"messages": HI, "stop": ["s"] * 400000})}),
        ("2 MB logit_bias", chat, {"content": json.dumps({"messages": HI, "logit_bias": bias})}),
    ]


def hand_made(server: Server) -> dict[str, Any]:
    n_vocab = int(httpx.get(server.url + "/v1/models").json()["data"][0]["meta"]["n_vocab"])
    results = []
    for label, path, kwargs in bad_requests(server.model, n_vocab):
        if "content" in kwargs:
            kwargs.setdefault("headers", {"content-type": "application/json"})
        try:
            status = httpx.post(server.url + path, timeout=120, **kwargs).status_code
        except httpx.HTTPError as exc:
            status = type(exc).__name__
        results.append((label, status))
        ok = isinstance(status, int) and 400 <= status < 500
        print(f"  {'ok ' if ok else 'BAD'} {status!s:>5}  {label}")
        if not server.alive:
            print("  the server died")
            break
    bad = [r for r in results if not (isinstance(r[1], int) and 400 <= r[1] < 500)]
    return {"cases": len(results), "not_4xx": bad, "alive": server.alive}


# ---------------------------------------------------------------------------------- flood


def flood(server: Server, seconds: float, clients: int) -> dict[str, Any]:
    n_vocab = int(httpx.get(server.url + "/v1/models").json()["data"][0]["meta"]["n_vocab"])
    bodies = flood_bodies(n_vocab)
    stop = threading.Event()
    sent: list[int] = []

    def client(seed: int) -> None:
        rng = random.Random(seed)
        with httpx.Client(timeout=120, headers={"content-type": "application/json"}) as http:
            while not stop.is_set():
                _, path, kwargs = rng.choice(bodies)
                sent.append(http.post(server.url + path, **kwargs).status_code)

    latencies: list[float] = []
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        futures = [pool.submit(client, i) for i in range(clients)]
        end = time.monotonic() + seconds
        with httpx.Client(timeout=30) as http:
            while time.monotonic() < end:
                started = time.perf_counter()
                http.get(server.url + "/health")
                latencies.append(time.perf_counter() - started)
                time.sleep(0.02)
        stop.set()
        for f in futures:
            f.result()
    latencies.sort()
    p = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000  # noqa: E731
    return {
        "bad_bodies_sent": len(sent),
        "statuses": sorted(set(sent)),
        "health_p50_ms": p(0.50),
        "health_p99_ms": p(0.99),
        "health_max_ms": latencies[-1] * 1000,
        "alive": server.alive,
    }


# ----------------------------------------------------------------------------------- soak


def mixed_request(http: httpx.Client, model: str, rng: random.Random) -> int:
    n = rng.randint(4, 24)
    msgs = [{"role": "user", "content": f"Tell me about the number {rng.randint(0, 999)}."}]
    choice = rng.randrange(5)
    if choice == 0:
        return http.post(
            "/v1/chat/completions", json={"messages": msgs, "max_tokens": n}
        ).status_code
    if choice == 1:
        body = {"messages": msgs, "max_tokens": n, "stream": True}
        path = "/v1/chat/completions"
    elif choice == 2:
        body = {"model": model, "messages": msgs, "max_tokens": n, "stream": True}
        path = "/v1/messages"
    elif choice == 3:
        return http.post("/v1/completions", json={"prompt": "Once", "max_tokens": n}).status_code
    else:
        body = {"input": msgs[0]["content"], "max_output_tokens": n}
        return http.post("/v1/responses", json=body).status_code
    with http.stream("POST", path, json=body) as r:
        for _ in r.iter_lines():
            pass
        return r.status_code


def soak(server: Server, minutes: float, clients: int = 32) -> dict[str, Any]:
    stop = threading.Event()
    statuses: list[int] = []

    def client(seed: int) -> None:
        rng = random.Random(seed)
        with httpx.Client(base_url=server.url, timeout=120) as http:
            while not stop.is_set():
                statuses.append(mixed_request(http, server.model, rng))

    samples: list[tuple[float, float]] = []
    warm_up = min(60.0, minutes * 60 / 5)
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        futures = [pool.submit(client, i) for i in range(clients)]
        start = time.monotonic()
        time.sleep(warm_up)
        end = time.monotonic() + minutes * 60
        while time.monotonic() < end:
            samples.append((time.monotonic() - start, server.rss_mib()))
            print(f"  t={samples[-1][0]:6.0f} s  RSS {samples[-1][1]:8.1f} MiB")
            time.sleep(min(10.0, max(0.0, end - time.monotonic())))
        samples.append((time.monotonic() - start, server.rss_mib()))
        stop.set()
        for f in futures:
            f.result()
    first, middle, last = samples[0][1], samples[len(samples) // 2][1], samples[-1][1]
    return {
        "requests": len(statuses),
        "statuses": sorted(set(statuses)),
        "rss_start_mib": first,
        "rss_middle_mib": middle,
        "rss_end_mib": last,
        "growth_pct": 100 * (last - first) / first,
        # the Responses store (1,024 responses) and the prompt cache fill during the first
        # half; what grows after that is what would leak
        "growth_second_half_pct": 100 * (last - middle) / middle,
        "alive": server.alive,
    }


# ----------------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=25, help="fuzz cases per op and mode")
    parser.add_argument("--case-timeout", type=float, default=60.0)
    parser.add_argument("--flood-seconds", type=float, default=30.0)
    parser.add_argument("--flood-clients", type=int, default=4)
    parser.add_argument("--soak-minutes", type=float, default=5.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--skip", default="", help="comma-separated parts to skip")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    server = Server(args.threads)
    report: dict[str, Any] = {}
    try:
        for name, run in [
            ("fuzz", lambda: fuzz(server, args.examples, args.case_timeout)),
            ("hand-made", lambda: hand_made(server)),
            ("flood", lambda: flood(server, args.flood_seconds, args.flood_clients)),
            ("soak", lambda: soak(server, args.soak_minutes)),
        ]:
            if name in skip:
                continue
            print(f"== {name}")
            report[name] = run()
            print(f"  {json.dumps(report[name], default=str)[:600]}")
            if not server.alive:
                print("the server died; see", server.log_path)
                break
    finally:
        report["exit_code"] = server.stop() if server.alive else "died"
    if args.json:
        print(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
