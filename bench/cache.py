"""Time to first token of turn 5 of a chat with a ~2,000-token history, RAM prompt cache on
vs off.

Between turn 4 and turn 5 another chat takes the only slot, so turn 5 can reuse its history
only through the RAM cache (`--cache-ram`): with it, the saved state (prompt and turn 4's
answer) is restored and only the new user message is decoded; without it, the whole history is
decoded again. In-process engine, embedded model, 2 threads.

    python bench/cache.py [--history 2000] [--threads 2] [--model PATH]
"""

from __future__ import annotations

import argparse
import time

from llamactl.engine.chat.model import ChatModel, ChatRequest
from llamactl.engine.engine import Engine, EngineConfig
from llamactl.engine.model import Model
from llamactl.engine.types import Done, SamplingParams, TextDelta
from llamactl.models import embedded_model_path

GREEDY = SamplingParams(temperature=0.0)
FACTS = [
    "The lighthouse keeper logs the weather every {i} hours and trims the lamp at dusk.",
    "Shipment {i} of grain reached the harbour after a storm delayed it for two days.",
    "The council voted on proposal {i}, which moves the market to the northern square.",
    "Old maps mark reef {i} as dangerous at low tide, so boats keep to the channel.",
]


def history(model: Model, target: int) -> list[dict]:
    """Turns 1-3 with their answers and turn 4 asked: about `target` tokens rendered."""
    msgs: list[dict] = [{"role": "system", "content": "You keep the harbour's records."}]
    i = 0
    for turn in range(4):
        msgs.append({"role": "user", "content": f"Record batch {turn + 1}, please."})
        lines = []
        while len(model.tokenize(" ".join(lines))) < (target - 100) // 3:
            lines.append(FACTS[i % len(FACTS)].format(i=i))
            i += 1
        msgs.append({"role": "assistant", "content": " ".join(lines)})
    return msgs[:-1]  # turn 4's answer is generated


def ttft(chat: ChatModel, messages: list[dict]) -> tuple[float, Done]:
    t0 = time.perf_counter()
    first = None
    stream = chat.start(ChatRequest(messages, sampling=GREEDY, max_tokens=8))
    done = None
    for event in stream.raw:
        if isinstance(event, TextDelta) and first is None:
            first = time.perf_counter() - t0
        if isinstance(event, Done):
            done = event
    return (first if first is not None else time.perf_counter() - t0), done


def run(model: Model, cache_mib: int, msgs: list[dict], threads: int) -> tuple[float, Done, int]:
    config = EngineConfig(n_parallel=1, n_ctx=8192, n_threads=threads, cache_ram_mib=cache_mib)
    with Engine(model, config) as engine:
        chat = ChatModel(engine)
        turn4 = chat.start(ChatRequest(msgs, sampling=GREEDY, max_tokens=24)).collect()[0]
        other = [
            {"role": "system", "content": "You are a poet."},
            {"role": "user", "content": "A haiku about rain."},
        ]
        chat.start(ChatRequest(other, sampling=GREEDY, max_tokens=8)).collect()
        turn5 = [
            *msgs,
            {"role": "assistant", "content": turn4.content},
            {"role": "user", "content": "Which batch mentioned reef 3?"},
        ]
        n = len(chat.render(ChatRequest(turn5)).tokens)
        seconds, done = ttft(chat, turn5)
        return seconds, done, n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--history", type=int, default=2000, help="history tokens before turn 5")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--model", default=None, help="GGUF (default: the embedded model)")
    args = ap.parse_args()
    model = Model(args.model or embedded_model_path())
    msgs = history(model, args.history)
    on, done_on, n = run(model, 8192, msgs, args.threads)
    off, done_off, _ = run(model, 0, msgs, args.threads)
    print(f"model {model.path.name}, turn 5 prompt {n} tokens, {args.threads} threads")
    print(f"{'':12}{'TTFT s':>10}{'cached':>10}")
    print(f"{'cache on':12}{on:>10.3f}{done_on.usage.cached_tokens:>10}")
    print(f"{'cache off':12}{off:>10.3f}{done_off.usage.cached_tokens:>10}")
    print(f"speed-up {off / on:.1f}x (target: at least 10x)")
    same = done_on.token_ids == done_off.token_ids
    print(f"turn 5 tokens identical: {'yes' if same else 'no (restored vs re-decoded chunks)'}")
    model.close()


if __name__ == "__main__":
    main()
