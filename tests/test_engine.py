"""The batched engine on the real embedded model: exactness, stops, limits, cancellation."""

from __future__ import annotations

import asyncio
import time

import pytest

from llamactl.core.errors import ContextLengthError, InvalidRequestError, QueueFullError
from llamactl.engine.engine import Engine, EngineConfig, GenerationRequest
from llamactl.engine.model import Model
from llamactl.engine.types import Done, SamplingParams, TextDelta
from llamactl.models import embedded_model_path

MODEL_FIXTURES = {"engine", "model"}  # fixtures that load a model: users are slow

GREEDY = SamplingParams(temperature=0.0)
TOPICS = ["cats", "the sea", "Paris", "prime numbers", "jazz", "volcanoes", "bread", "rain"]


def chat_prompt(model: Model, text: str) -> list[int]:
    return model.tokenize(
        f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n", add_special=False
    )


@pytest.fixture(scope="module")
def model() -> Model:
    return Model(embedded_model_path())


@pytest.fixture(scope="module")
def engine(model: Model):
    with Engine(model, EngineConfig(n_parallel=8, n_ctx=8 * 1024)) as eng:
        yield eng


def run(engine: Engine, prompt: list[int], **kw) -> tuple[str, Done]:
    texts, dones = engine.submit(GenerationRequest(prompt, **kw)).collect()
    return texts[0], dones[0]


def test_greedy_is_deterministic(engine, model):
    prompt = chat_prompt(model, "Tell me about cats.")
    a = run(engine, prompt, sampling=GREEDY, max_tokens=24)
    b = run(engine, prompt, sampling=GREEDY, max_tokens=24, cache_prompt=False)
    assert a[1].token_ids == b[1].token_ids
    assert a[0] == b[0] and a[0].strip()


def test_eight_concurrent_equal_their_solo_runs(engine, model):
    prompts = [chat_prompt(model, f"Write two sentences about {t}.") for t in TOPICS]
    solo = [run(engine, p, sampling=GREEDY, max_tokens=40, cache_prompt=False)[1] for p in prompts]
    # staggered admission: the later ones join while the first ones are generating
    streams = []
    for p in prompts:
        streams.append(
            engine.submit(GenerationRequest(p, GREEDY, max_tokens=40, cache_prompt=False))
        )
        time.sleep(0.02)
    together = [s.collect()[1][0] for s in streams]
    for topic, alone, batched in zip(TOPICS, solo, together, strict=True):
        assert batched.token_ids == alone.token_ids, topic


def test_max_tokens_gives_length_and_usage(engine, model):
    prompt = chat_prompt(model, "Count from one to one hundred.")
    text, done = run(engine, prompt, sampling=GREEDY, max_tokens=5)
    assert done.finish_reason == "length"
    assert done.usage.completion_tokens == 5
    assert done.usage.prompt_tokens == len(prompt)
    assert done.timings.predicted_n == 5


def test_eos_gives_stop(engine, model):
    text, done = run(engine, chat_prompt(model, "Say hi."), sampling=GREEDY, max_tokens=200)
    assert done.finish_reason == "stop" and done.stop_string is None


def test_stop_string_split_across_tokens_is_not_leaked(engine, model):
    prompt = chat_prompt(model, "Tell me about cats.")
    full, _ = run(engine, prompt, sampling=GREEDY, max_tokens=40)
    # a stop string that straddles token boundaries: end of one word, start of the next
    words = full.split(" ")
    stop = words[3][-2:] + " " + words[4][:2]
    assert stop in full
    deltas: list[str] = []
    stream = engine.submit(GenerationRequest(prompt, GREEDY, max_tokens=40, stop=(stop,)))
    for ev in stream:
        if isinstance(ev, TextDelta):
            deltas.append(ev.text)
    done = stream.done[0]
    text = "".join(deltas)
    assert done.finish_reason == "stop" and done.stop_string == stop
    # the deltas add up to exactly the text before the stop: no partial stop string leaked
    assert text == full[: full.index(stop)]


def test_prompt_longer_than_context_is_refused_and_engine_keeps_serving(engine, model):
    too_long = chat_prompt(model, "word " * (engine.n_ctx_slot + 10))
    with pytest.raises(ContextLengthError, match="context"):
        engine.submit(GenerationRequest(too_long, GREEDY, max_tokens=4))
    _, done = run(engine, chat_prompt(model, "Say hi."), sampling=GREEDY, max_tokens=4)
    assert done.finish_reason in ("stop", "length")


def test_generation_stops_at_the_slot_context(model):
    with Engine(model, EngineConfig(n_parallel=1, n_ctx=64)) as small:
        prompt = chat_prompt(model, "Write a long story about a dragon.")
        _, done = run(small, prompt, sampling=GREEDY, ignore_eos=True)
        assert done.finish_reason == "length"
        # every position of the slot was decoded; the last sampled token needs none
        assert done.usage.prompt_tokens + done.usage.completion_tokens == small.n_ctx_slot + 1


def test_ignore_eos_never_draws_an_end_of_generation_token(engine, model):
    """As llama-server: `ignore_eos` bans every end-of-generation token, so a greedy answer
    runs to max_tokens without one (it is not drawn and then stepped over)."""
    assert model.eog_tokens and all(model.is_eog(t) for t in model.eog_tokens)
    stream = engine.submit(
        GenerationRequest(chat_prompt(model, "Say hi."), GREEDY, max_tokens=48, ignore_eos=True)
    )
    tokens = [t for ev in stream if isinstance(ev, TextDelta) for t in ev.token_ids]
    done = stream.done[0]
    assert done is not None and done.finish_reason == "length"
    assert done.usage.completion_tokens == 48
    assert not set(tokens) & set(model.eog_tokens)


def test_cancel_frees_the_slot_and_nothing_follows_done(model):
    with Engine(model, EngineConfig(n_parallel=1, n_ctx=2048)) as one:
        stream = one.submit(
            GenerationRequest(chat_prompt(model, "Write a long essay."), GREEDY, ignore_eos=True)
        )
        seen = 0
        events = []
        for ev in stream:
            events.append(ev)
            seen += isinstance(ev, TextDelta)
            if seen == 3:
                stream.cancel()
        assert isinstance(events[-1], Done) and events[-1].finish_reason == "cancelled"
        assert sum(isinstance(e, Done) for e in events) == 1
        # the only slot is free again: a new request runs to completion
        _, done = run(one, chat_prompt(model, "Say hi."), sampling=GREEDY, max_tokens=4)
        assert done.finish_reason in ("stop", "length")
        assert one.busy_slots == 0


def test_cancel_while_queued(model):
    with Engine(model, EngineConfig(n_parallel=1, n_ctx=2048)) as one:
        first = one.submit(GenerationRequest(chat_prompt(model, "Essay."), GREEDY, max_tokens=30))
        queued = one.submit(GenerationRequest(chat_prompt(model, "Hi."), GREEDY, max_tokens=30))
        queued.cancel()
        events = list(queued)
        assert [type(e) for e in events] == [Done] and events[0].finish_reason == "cancelled"
        assert first.collect()[1][0].finish_reason == "length"


def test_queue_limit(model):
    with Engine(model, EngineConfig(n_parallel=1, n_ctx=1024, max_queue=1)) as one:
        long = GenerationRequest(chat_prompt(model, "Essay."), GREEDY, max_tokens=64)
        a = one.submit(long)
        while one.busy_slots == 0:
            time.sleep(0.005)
        b = one.submit(long)
        with pytest.raises(QueueFullError):
            one.submit(long)
        a.cancel()
        b.cancel()


def test_n_choices_share_the_prompt(engine, model):
    prompt = chat_prompt(model, "Name a colour.")
    seeded = SamplingParams(temperature=1.0, top_k=40, seed=7)
    texts, dones = engine.submit(GenerationRequest(prompt, seeded, max_tokens=12, n=4)).collect()
    assert [d.index for d in sorted(dones, key=lambda d: d.index)] == [0, 1, 2, 3]
    assert len(set(texts)) > 1  # seed + k per child gives different continuations
    # the prompt was decoded once: only the parent reports prompt time
    assert all(d.usage.prompt_tokens == len(prompt) for d in dones)
    greedy_texts, _ = engine.submit(GenerationRequest(prompt, GREEDY, max_tokens=12, n=3)).collect()
    assert len(set(greedy_texts)) == 1


def test_n_larger_than_slots_is_refused(engine, model):
    with pytest.raises(InvalidRequestError, match="n must be"):
        engine.submit(GenerationRequest(chat_prompt(model, "x"), GREEDY, n=9))


def test_prefix_of_previous_request_is_reused(model):
    with Engine(model, EngineConfig(n_parallel=1, n_ctx=2048)) as one:
        prompt = chat_prompt(model, "Tell me about the moon.")
        _, cold = run(one, prompt, sampling=GREEDY, max_tokens=8)
        _, warm = run(one, prompt, sampling=GREEDY, max_tokens=8)
        assert cold.usage.cached_tokens == 0
        assert warm.usage.cached_tokens == len(prompt) - 1
        assert warm.token_ids == cold.token_ids


def test_logprobs(engine, model):
    _, done = run(engine, chat_prompt(model, "Hi"), sampling=GREEDY, max_tokens=3, logprobs=2)
    stream = engine.submit(
        GenerationRequest(chat_prompt(model, "Hi"), GREEDY, max_tokens=3, logprobs=2)
    )
    deltas = [e for e in stream if isinstance(e, TextDelta)]
    chosen, top = deltas[0].logprobs[0]
    assert chosen.logprob <= 0 and len(top) == 2
    assert top[0].token == chosen.token  # greedy picks the most likely token


def test_async_iteration(engine, model):
    async def main() -> str:
        stream = engine.submit(GenerationRequest(chat_prompt(model, "Hi"), GREEDY, max_tokens=6))
        text = ""
        async for ev in stream:
            if isinstance(ev, TextDelta):
                text += ev.text
        return text

    sync_text, _ = run(engine, chat_prompt(model, "Hi"), sampling=GREEDY, max_tokens=6)
    assert asyncio.run(main()) == sync_text


def test_long_prompts_of_unequal_lengths_together_equal_their_solo_runs(model):
    """Chunks of 64 rows or more are computed by another flash-attention kernel: the engine
    decodes them alone, so a long prompt gives the same tokens whatever joins its batch."""
    story = "Once upon a time a cat and a dog lived in a small house by the sea. "
    prompts = [chat_prompt(model, story * k + f"Continue the story {k}.") for k in (3, 4, 5, 6)]
    assert all(len(p) >= 64 for p in prompts)
    with Engine(model, EngineConfig(n_parallel=1, n_ctx=2048)) as solo_engine:
        solo = [
            run(solo_engine, p, sampling=GREEDY, max_tokens=12, cache_prompt=False)[1]
            for p in prompts
        ]
    with Engine(model, EngineConfig(n_parallel=4, n_ctx=4 * 2048)) as eng:
        streams = [
            eng.submit(GenerationRequest(p, GREEDY, max_tokens=12, cache_prompt=False))
            for p in prompts
        ]
        together = [s.collect()[1][0] for s in streams]
    for alone, batched in zip(solo, together, strict=True):
        assert batched.token_ids == alone.token_ids


def test_long_context_logits_do_not_depend_on_other_slots(model):
    """Past 256 tokens, a lone decode (given a companion row) and one batched with other slots
    take the same flash-attention kernel: every token's log-probability is the same float
    alone, in company, and on a one-slot engine."""
    story = "Once upon a time a cat and a dog lived in a small house by the sea. "
    long = chat_prompt(model, story * 18 + "Continue the story.")
    assert len(long) > 300
    others = [chat_prompt(model, f"Write two sentences about {t}.") for t in TOPICS[:2]]

    def logprobs(engine: Engine, company: list[list[int]]) -> list[float]:
        streams = [
            engine.submit(GenerationRequest(p, GREEDY, max_tokens=24, logprobs=0))
            for p in [long, *company]
        ]
        values = [
            lp[0].logprob for e in streams[0] if isinstance(e, TextDelta) for lp in e.logprobs
        ]
        for s in streams[1:]:
            s.collect()
        return values

    with Engine(model, EngineConfig(n_parallel=1, n_ctx=2048)) as solo_engine:
        solo = logprobs(solo_engine, [])
    with Engine(model, EngineConfig(n_parallel=3, n_ctx=3 * 2048)) as eng:
        alone = logprobs(eng, [])
        together = logprobs(eng, others)
    assert together == alone == solo
