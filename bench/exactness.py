"""What exactness costs in the engine: the KV types and the companion rows, side by side.

Modes: `auto` (the default: f16 with companion rows, exact), `f16-bare` (f16 without
companions: llama.cpp's kernels as llama-server takes them, not exact), `bf16` (exact, one
kernel for every shape). Each mode runs in its own engine, rounds interleaved, and prints
median [min-max] of:
  - cold prefill of a ~1,500-token prompt (seconds to its first token);
  - one stream's decode tokens/s after that long prompt (every step a lone row past 256 cells:
    the companion's case), and after a short prompt;
  - 8 concurrent streams' aggregate tokens/s.

    python bench/exactness.py [--rounds 3] [--tokens 128] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from llamactl.engine.engine import Engine, EngineConfig, GenerationRequest
from llamactl.engine.model import Model
from llamactl.engine.types import SamplingParams, TextDelta
from llamactl.models import embedded_model_path

GREEDY = SamplingParams(temperature=0.0)
TOPICS = ["the ocean", "mountains", "coffee", "old trains", "winter", "a library", "rain", "jazz"]


def chat(model: Model, text: str) -> list[int]:
    return model.tokenize(
        f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n", add_special=False
    )


def long_prompt(model: Model) -> list[int]:
    notes = " ".join(f"Note {i}: the {TOPICS[i % 8]} was {i * 7 % 13} units." for i in range(130))
    return chat(model, "Summarise these notes. " + notes)


def timed_stream(engine: Engine, prompt: list[int], tokens: int) -> tuple[float, float]:
    """(seconds to the first token, decode tokens/s from the first token to the last)."""
    t0 = time.perf_counter()
    first = last = 0.0
    n = 0
    req = GenerationRequest(prompt, GREEDY, max_tokens=tokens, ignore_eos=True, cache_prompt=False)
    for event in engine.submit(req):
        if isinstance(event, TextDelta):
            last = time.perf_counter()
            first = first or last
            n += len(event.token_ids)
    return first - t0, (n - 1) / (last - first) if last > first else 0.0


def aggregate(engine: Engine, model: Model, tokens: int) -> float:
    t0 = time.perf_counter()
    streams = [
        engine.submit(
            GenerationRequest(
                chat(model, f"Write a long story about {t}."),
                GREEDY,
                max_tokens=tokens,
                ignore_eos=True,
                cache_prompt=False,
            )
        )
        for t in TOPICS
    ]
    n = sum(len(s.collect()[1][0].token_ids) for s in streams)
    return n / (time.perf_counter() - t0)


def measure(model: Model, mode: str, tokens: int, threads: int) -> dict[str, float]:
    kv = "f16" if mode == "f16-bare" else mode
    with Engine(model, EngineConfig(n_parallel=8, n_threads=threads, kv_type=kv)) as engine:
        if mode == "f16-bare":
            engine._companions = False  # llama.cpp's kernels as they come: not exact
        timed_stream(engine, chat(model, "Say hi."), 4)  # warm-up
        cold, long_tps = timed_stream(engine, long_prompt(model), tokens)
        _, short_tps = timed_stream(engine, chat(model, "Write a long story about cats."), tokens)
        return {
            "cold prefill 1.5k s": cold,
            "decode after 1.5k tok/s": long_tps,
            "decode short tok/s": short_tps,
            "8 streams tok/s": aggregate(engine, model, tokens),
        }


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--modes", default="auto,f16-bare,bf16")
    args = ap.parse_args()
    model = Model(embedded_model_path())
    modes = args.modes.split(",")
    results: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
    for r in range(args.rounds):
        for mode in modes:
            results[mode].append(measure(model, mode, args.tokens, args.threads))
            print(f"round {r + 1}/{args.rounds}: {mode} done", flush=True)
    print(f"{args.threads} threads, {args.tokens} tokens, {args.rounds} rounds: median [min-max]")
    keys: list[str] = list(results[modes[0]][0])
    show: Callable[[str, str], str] = lambda m, k: summary([x[k] for x in results[m]])  # noqa: E731
    for key in keys:
        print(f"{key:26} " + "   ".join(f"{m}: {show(m, key)}" for m in modes))


if __name__ == "__main__":
    main()
