"""An agent session's turns, replayed against `llamactl serve` and llama-server: time to first
token and prompt tokens reused, turn by turn.

The requests are a real client's: opencode (`opencode run`, installed by
scripts/install-clients.sh) is pointed at `llamactl serve` through a recording proxy and its
first requests are kept (its title request and its agent steps, ~7.4k tokens with its tools
described). They are then sent again, one after another as the agent sent them, to a fresh
server of each kind, with `max_tokens: 1`: a request's time is its time to first token, and
each kind sees the same conversation. Rounds interleave the servers; medians and spread.

    python bench/agent_replay.py --llama-server PATH [--model gemma3] [--requests 7]
        [--rounds 3] [--saved FILE]

`--saved FILE` replays requests recorded before (a JSON list written by an earlier run, next
to its figures) instead of running opencode again.
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import shutil
import socketserver
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from serve import free_port, model_path, summary, wait_healthy

from llamactl.layout import entry_point

CLIENTS = Path.home() / ".cache" / "llamactl-tests" / "clients" / "node_modules" / ".bin"


def start_server(kind: str, model: str, args: argparse.Namespace) -> tuple[subprocess.Popen, str]:
    """A fresh server of `kind` with 2 slots of 32k (an agent and its side requests)."""
    port = free_port()
    env = {**os.environ}
    if kind == "llamactl":
        cmd = [*entry_point(), "serve", "-m", model, "--port", str(port), "-np", "2"]
        cmd += ["-c", "65536", "-t", str(args.threads), "--temp", "0", *args.llamactl_args]
    else:
        binary = args.llama_server or shutil.which("llama-server")
        if not binary:
            raise SystemExit("llama-server not found: --llama-server PATH")
        cmd = [binary, "-m", model, "--port", str(port), "-np", "2", "-c", "65536"]
        cmd += ["-t", str(args.threads), "--no-kv-unified", "--no-webui", "--temp", "0"]
        env["LD_LIBRARY_PATH"] = os.path.dirname(binary)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, proc)
    return proc, url


class Recorder(http.server.BaseHTTPRequestHandler):
    """Forwards each request to `upstream` and keeps the chat completion requests' bodies."""

    upstream = ""
    kept: list[dict[str, Any]] = []
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self._forward(b"")

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        if self.path.endswith("/chat/completions"):
            self.kept.append(json.loads(body))
        self._forward(body)

    def _forward(self, body: bytes) -> None:
        skip = {"host", "content-length", "accept-encoding", "connection"}
        headers = {k: v for k, v in self.headers.items() if k.lower() not in skip}
        with (
            httpx.Client(timeout=None) as client,
            client.stream(
                self.command, self.upstream + self.path, content=body, headers=headers
            ) as reply,
        ):
            self.send_response(reply.status_code)
            for key, value in reply.headers.items():
                if key.lower() not in ("content-length", "transfer-encoding", "connection"):
                    self.send_header(key, value)
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            try:
                for chunk in reply.iter_raw():
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
            except ConnectionError:  # the agent was stopped mid-answer
                pass

    def log_message(self, *_: Any) -> None:
        pass


def record(model: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    """opencode's first `args.requests` chat requests against llamactl (greedy, 128 tokens)."""
    opencode = args.opencode or CLIENTS / "opencode"
    if not Path(opencode).exists():
        raise SystemExit("opencode not found: bash scripts/install-clients.sh, or --opencode")
    proc, url = start_server("llamactl", model, args)
    Recorder.upstream, Recorder.kept = url, []
    proxy = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Recorder)
    proxy.daemon_threads = True
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            home, work = Path(tmp, "home"), Path(tmp, "work")
            work.mkdir(parents=True)
            (work / "notes.txt").write_text("The launch code is 4471.\n")
            base = f"http://127.0.0.1:{proxy.server_address[1]}/v1"
            model_entry = {"name": "local", "limit": {"context": 32768, "output": 128}}
            provider = {
                "npm": "@ai-sdk/openai-compatible",
                "options": {"baseURL": base},
                "models": {"local": model_entry},
            }
            config = {"provider": {"llamactl": provider}, "autoupdate": False, "share": "disabled"}
            (work / "opencode.json").write_text(json.dumps(config))
            env = {**os.environ, "HOME": str(home), "PWD": str(work)}
            for name, sub in (("CONFIG", ".config"), ("DATA", ".local/share"), ("CACHE", ".cache")):
                env[f"XDG_{name}_HOME"] = str(home / sub)
            command = [str(opencode), "run", "-m", "llamactl/local", "Read the file notes.txt."]
            agent = subprocess.Popen(
                command,
                cwd=work,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            deadline = time.monotonic() + 900
            while agent.poll() is None and len(Recorder.kept) <= args.requests:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            agent.terminate()
            agent.wait(30)
    finally:
        proxy.shutdown()
        proc.terminate()
        proc.wait(30)
    return Recorder.kept[: args.requests]


def replay(kind: str, model: str, requests: list[dict[str, Any]], args: argparse.Namespace):
    """Each request's seconds to its first token and prompt tokens from the cache."""
    proc, url = start_server(kind, model, args)
    out: list[tuple[float, int, int]] = []
    try:
        for body in requests:
            body = {**body, "max_tokens": 1, "stream": False, "temperature": 0}
            body.pop("stream_options", None)
            t0 = time.perf_counter()
            reply = httpx.post(url + "/v1/chat/completions", json=body, timeout=1800)
            seconds = time.perf_counter() - t0
            reply.raise_for_status()
            data = reply.json()
            usage = data.get("usage") or {}
            cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
            if cached is None:
                cached = (data.get("timings") or {}).get("cache_n", 0)
            out.append((seconds, int(usage.get("prompt_tokens", 0)), int(cached or 0)))
    finally:
        proc.terminate()
        proc.wait(30)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gemma3", help="smollm2, gemma3 or a GGUF path")
    ap.add_argument("--llama-server", help="path to llama-server (b11434)")
    ap.add_argument("--opencode", help="path to the opencode binary")
    ap.add_argument("--requests", type=int, default=7, help="requests kept from the session")
    ap.add_argument("--rounds", type=int, default=3, help="rounds, servers interleaved")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--saved", type=Path, help="replay these recorded requests (JSON list)")
    ap.add_argument("--save", type=Path, help="write the recorded requests here")
    ap.add_argument(
        "--strip-tools",
        action="store_true",
        help="replay without the tools (llama-server leaves them out of a template that has "
        "none; llamactl describes them: this compares the same prompts)",
    )
    ap.add_argument(
        "--llamactl-args", nargs=argparse.REMAINDER, default=[], help="more `serve` flags"
    )
    args = ap.parse_args()
    model = model_path(args.model)
    if args.saved:
        requests = json.loads(args.saved.read_text())
    else:
        print(f"recording opencode's first {args.requests} requests...", file=sys.stderr)
        requests = record(model, args)
        if args.save:
            args.save.write_text(json.dumps(requests))
    roles = ["agent" if r.get("tools") else "side" for r in requests]
    if args.strip_tools:
        requests = [
            {k: v for k, v in r.items() if k not in ("tools", "tool_choice")} for r in requests
        ]
    kinds = ("llamactl", "llama-server")
    runs: dict[str, list[list[tuple[float, int, int]]]] = {kind: [] for kind in kinds}
    for r in range(args.rounds):
        for kind in kinds if r % 2 == 0 else kinds[::-1]:
            print(f"round {r + 1}: {kind}", file=sys.stderr)
            runs[kind].append(replay(kind, model, requests, args))
    print(f"{len(requests)} requests of an opencode session on {Path(model).name}, ")
    print(f"max_tokens 1, {args.rounds} rounds: TTFT seconds median [min-max], cached/prompt\n")
    print(f"{'turn':<5} {'kind':<6} {'llamactl':<22} {'llama-server':<22} ratio")
    for i, kind in enumerate(roles):
        cells, medians = [], []
        for name in kinds:
            times = [run[i][0] for run in runs[name]]
            prompt, cached = runs[name][-1][i][1], runs[name][-1][i][2]
            cells.append(f"{summary(times, '{:.2f}')} {cached}/{prompt}")
            medians.append(statistics.median(times))
        ratio = medians[1] / medians[0] if medians[0] else float("nan")
        print(f"{i + 1:<5} {kind:<6} {cells[0]:<22} {cells[1]:<22} {ratio:.2f}")
    print("\nratio: llama-server's TTFT / llamactl's (>1: llamactl faster)")


if __name__ == "__main__":
    main()
