"""Engine throughput on the embedded model, side by side with llama-cpp-python's `Llama`.

Prints: single-stream decode tokens/s of the engine and of `Llama` on the same prompt (ratio),
and aggregate tokens/s with 1, 4 and 8 concurrent streams. Targets (issue #2): single stream at
least 0.95x `Llama`; 8 streams at least 1.7x one stream.

    python bench/engine.py [--threads 2] [--tokens 128] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

from llamactl.engine.engine import Engine, EngineConfig, GenerationRequest
from llamactl.engine.model import Model
from llamactl.engine.types import SamplingParams, TextDelta
from llamactl.models import embedded_model_path

TOPICS = [
    "the ocean",
    "mountains",
    "a city at night",
    "coffee",
    "old trains",
    "winter",
    "a library",
    "the desert",
]


def prompt_text(topic: str) -> str:
    return f"<|im_start|>user\nWrite a long story about {topic}.<|im_end|>\n<|im_start|>assistant\n"


def engine_single(engine: Engine, model: Model, n_tokens: int) -> float:
    """Decode tokens/s of one stream: first token to last, prompt excluded."""
    stream = engine.submit(
        GenerationRequest(
            model.tokenize(prompt_text(TOPICS[0])),
            SamplingParams(temperature=0),
            max_tokens=n_tokens,
            ignore_eos=True,
            cache_prompt=False,
        )
    )
    first = last = None
    count = 0
    for ev in stream:
        if isinstance(ev, TextDelta):
            last = time.perf_counter()
            first = first or last
            count += len(ev.token_ids)
    return (count - 1) / (last - first)


def llama_single(path: str, threads: int, n_tokens: int) -> float:
    from llama_cpp import Llama

    llm = Llama(
        model_path=path,
        n_ctx=4096,
        n_threads=threads,
        n_threads_batch=threads,
        n_batch=512,
        verbose=False,
        flash_attn=True,
    )
    first = last = None
    count = 0
    for _chunk in llm.create_completion(
        prompt_text(TOPICS[0]), max_tokens=n_tokens, temperature=0.0, stream=True, logit_bias=None
    ):
        last = time.perf_counter()
        first = first or last
        count += 1
    del llm
    return (count - 1) / (last - first)


def aggregate(engine: Engine, model: Model, n_streams: int, n_tokens: int) -> tuple[float, float]:
    """(tokens/s with prompts included, tokens/s of the generation phase) for n concurrent
    streams. The generation phase runs from the first token of any stream to the last token of
    all; prompts are all submitted at once, so they are decoded before it starts."""
    t0 = time.perf_counter()
    streams = [
        engine.submit(
            GenerationRequest(
                model.tokenize(prompt_text(TOPICS[i % len(TOPICS)])),
                SamplingParams(temperature=0),
                max_tokens=n_tokens,
                ignore_eos=True,
                cache_prompt=False,
            )
        )
        for i in range(n_streams)
    ]
    first: list[float] = []
    total = 0
    for stream in streams:  # events queue up meanwhile; arrival times are what we need
        for ev in stream:
            if isinstance(ev, TextDelta):
                total += len(ev.token_ids)
    end = time.perf_counter()
    for stream in streams:
        done = stream.done[0]
        first.append(end - (done.timings.predicted_ms / 1000.0))
    gen_window = end - min(first)
    return total / (end - t0), total / gen_window


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--cache-type", default="bf16", choices=["bf16", "f16", "q8_0"], help="llamactl's KV type"
    )
    args = ap.parse_args()
    path = str(embedded_model_path())
    model = Model(path)
    print(
        f"model: {model.info.name} ({model.info.size_bytes / 2**20:.0f} MiB), "
        f"threads={args.threads}, {args.tokens} tokens per stream, median of {args.repeats}, "
        f"llamactl KV {args.cache_type} (Llama: f16)"
    )

    with Engine(
        model, EngineConfig(n_parallel=8, n_threads=args.threads, kv_type=args.cache_type)
    ) as engine:
        engine_single(engine, model, 8)  # warm-up
        ours = statistics.median(
            engine_single(engine, model, args.tokens) for _ in range(args.repeats)
        )
        runs = {n: [aggregate(engine, model, n, args.tokens) for _ in range(args.repeats)]
                for n in (1, 4, 8)}  # fmt: skip
        agg = {n: statistics.median(r[0] for r in rs) for n, rs in runs.items()}
        gen = {n: statistics.median(r[1] for r in rs) for n, rs in runs.items()}
    theirs = statistics.median(
        llama_single(path, args.threads, args.tokens) for _ in range(args.repeats)
    )

    print(
        f"single-stream decode  llamactl {ours:7.1f} tok/s   Llama {theirs:7.1f} tok/s   "
        f"ratio {ours / theirs:.2f}x (target >= 0.95x)"
    )
    print("aggregate (prompts included | generation phase only):")
    for n in agg:
        print(
            f"  {n} stream{'s' if n > 1 else ' '}  {agg[n]:7.1f} tok/s ({agg[n] / agg[1]:.2f}x) | "
            f"{gen[n]:7.1f} tok/s ({gen[n] / gen[1]:.2f}x)"
        )
    print(
        f"8 streams vs 1: {agg[8] / agg[1]:.2f}x with prompts, {gen[8] / gen[1]:.2f}x generation "
        "(target >= 1.7x)"
    )


if __name__ == "__main__":
    main()
