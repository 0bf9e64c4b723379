"""The RAM prompt cache on the real embedded model: hit sizes, restores that continue exactly,
eviction by size, multi-turn chat, slot choice, decision models, concurrency."""

from __future__ import annotations

import threading

import pytest

from llamactl.engine.chat.model import ChatModel, ChatRequest
from llamactl.engine.chat.spans import split_spans, user_starts
from llamactl.engine.engine import Engine, EngineConfig, GenerationRequest
from llamactl.engine.model import Model
from llamactl.engine.prompt_cache import CacheEntry, PromptCache
from llamactl.engine.types import SamplingParams
from llamactl.models import embedded_model_path

MODEL_FIXTURES = {"model"}  # fixtures that load a model: users are slow

GREEDY = SamplingParams(temperature=0.0)


@pytest.fixture(scope="module")
def model() -> Model:
    return Model(embedded_model_path())


def chat_tokens(model: Model, user: str, system: str = "Test") -> list[int]:
    return model.tokenize(
        f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n"
        "<|im_start|>assistant\n",
        add_special=False,
    )


def run(engine: Engine, prompt: list[int], max_tokens: int = 12, **kw):
    _, dones = engine.submit(
        GenerationRequest(prompt, GREEDY, max_tokens=max_tokens, **kw)
    ).collect()
    return dones[0]


def common(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def test_cached_tokens_follow_the_shared_prefix(model):
    """The spec's pattern on one slot: 0, then n-1 for the same prompt, then the prefix."""
    with Engine(model, EngineConfig(n_parallel=1, n_ctx=2048)) as eng:
        prompts = [chat_tokens(model, u) for u in ("1 2 3 4 5 6", "1 2 3 4 5 6", "1 2 3 4 5 9")]
        prompts.append(chat_tokens(model, "1 2 3 9 9 9"))
        got = [run(eng, p, max_tokens=4).usage.cached_tokens for p in prompts]
        assert got[:2] == [0, len(prompts[1]) - 1]
        assert got[2] == common(prompts[1], prompts[2]) > 0
        assert got[3] == common(prompts[2], prompts[3]) < got[2]


def test_a_slot_taken_by_another_prompt_is_restored_from_the_cache(model):
    """One slot: A, then B overwrites it (A goes to the cache), then A's continuation is
    served from the restored state, exactly as if A had never left the slot."""
    a = chat_tokens(model, "Name three rivers of Europe.")
    b = chat_tokens(model, "Write a haiku about snow.", system="You are a poet.")
    with Engine(model, EngineConfig(n_parallel=1, n_ctx=2048)) as eng:
        first = run(eng, a)
        run(eng, b)
        assert len(eng.cache) == 1 and eng.cache.stats.saves == 1
        follow = a + list(first.token_ids[:-1]) + model.tokenize(" More?", add_special=False)
        warm = run(eng, follow)
        assert eng.cache.stats.restores == 1
        assert warm.usage.cached_tokens == len(a) + len(first.token_ids) - 1
    with Engine(model, EngineConfig(n_parallel=1, n_ctx=2048, cache_ram_mib=0)) as eng:
        assert eng.cache is None
        run(eng, a)
        stayed = run(eng, follow)  # the same KV, never saved nor restored
    assert warm.token_ids == stayed.token_ids
    assert warm.usage.cached_tokens == stayed.usage.cached_tokens


def test_restored_prompt_continues_like_a_cold_run(model):
    a = chat_tokens(model, "Tell me about the moon.")
    with Engine(model, EngineConfig(n_parallel=1, n_ctx=2048)) as eng:
        cold = run(eng, a, max_tokens=20)
        assert cold.usage.cached_tokens == 0
        run(eng, chat_tokens(model, "Something else entirely, please.", system="Other"))
        warm = run(eng, a, max_tokens=20)
        assert warm.usage.cached_tokens == len(a) - 1
        assert warm.token_ids == cold.token_ids


def test_multi_turn_chat_hits_the_cache_with_the_previous_answer(model):
    """Turn 2 reuses turn 1's prompt and answer even after another chat used the slot."""
    with Engine(model, EngineConfig(n_parallel=1, n_ctx=4096)) as eng:
        chat = ChatModel(eng)
        turn1 = [{"role": "user", "content": "Tell me about cats."}]
        r1 = chat.start(ChatRequest(turn1, sampling=GREEDY, max_tokens=10)).collect()[0]
        chat.start(
            ChatRequest([{"role": "user", "content": "Hi!"}], sampling=GREEDY, max_tokens=4)
        ).collect()
        turn2 = [
            *turn1,
            {"role": "assistant", "content": r1.content},
            {"role": "user", "content": "And dogs?"},
        ]
        r2 = chat.start(ChatRequest(turn2, sampling=GREEDY, max_tokens=8)).collect()[0]
        n1 = len(chat.render(ChatRequest(turn1)).tokens)
        assert r2.done.usage.cached_tokens >= n1 + len(r1.done.token_ids) - 2
        # short enough that no row of turn 2 is tiled cold either: nothing to decode again
        # for exactness (prompt_chunks.py)
        assert r2.done.usage.prompt_tokens <= 64


def test_eviction_keeps_the_cache_under_its_size(model):
    """About 23 KB of KV per token: 1 MiB holds one ~30-token state, not two."""
    with Engine(model, EngineConfig(n_parallel=1, n_ctx=2048, cache_ram_mib=1)) as eng:
        filler = " is the word of the day, and we will use it in a sentence about the weather."
        prompts = [model.tokenize(w + filler * 2) for w in ("Apple", "River", "Stone")]
        assert all(25 <= len(p) <= 40 for p in prompts)
        for p in prompts:
            run(eng, p, max_tokens=4)
        assert eng.cache.stats.saves == 2 and eng.cache.stats.evictions == 1
        assert len(eng.cache) == 1 and eng.cache.nbytes <= 1024 * 1024
        assert eng.cache.entries[0].tokens[: len(prompts[1])] == prompts[1]


def test_prefix_entries_are_replaced_and_oversized_entries_skipped():
    cache = PromptCache(1, ("layout",))
    small = CacheEntry([1, 2], bytearray(10), ("layout",))  # type: ignore[arg-type]
    longer = CacheEntry([1, 2, 3], bytearray(10), ("layout",))  # type: ignore[arg-type]
    assert cache.add(small) and cache.add(longer)
    assert [e.tokens for e in cache.entries] == [[1, 2, 3]]
    assert not cache.add(CacheEntry([9], bytearray(2 * 1024 * 1024), ("layout",)))  # type: ignore[arg-type]
    assert cache.take([7, 7, 7], 0, 0) is None  # nothing shared
    other = CacheEntry([5, 6], bytearray(4), ("other layout",))  # type: ignore[arg-type]
    cache.entries.append(other)
    assert cache.take([5, 6, 7], 0, 0) is None  # a state restores only into its own layout
    assert cache.take([1, 2, 3, 4], 0, 0) is longer and len(cache) == 1


def test_an_entry_a_prompt_cuts_is_copied_out_and_kept():
    """A prompt sharing only the start of an entry (another conversation after the same
    system prompt) gets a copy; the entry stays for its own conversation's next turn."""
    cache = PromptCache(1, ("layout",))
    a = CacheEntry([1, 2, 3, 4], bytearray(10), ("layout",))  # type: ignore[arg-type]
    b = CacheEntry([1, 2, 8, 9], bytearray(10), ("layout",))  # type: ignore[arg-type]
    assert cache.add(a) and cache.add(b)
    assert cache.take([1, 2, 3, 7], 0, 0) is a  # cuts a's tail: kept, now the newest
    assert [e.tokens for e in cache.entries] == [[1, 2, 8, 9], [1, 2, 3, 4]]
    assert cache.take([1, 2, 3, 4, 5], 0, 0) is a  # extends a whole: the slot holds it now
    assert [e.tokens for e in cache.entries] == [[1, 2, 8, 9]]


def test_without_cache_idle_slots_a_slot_is_saved_only_when_a_request_keeps_less_than_half(
    model,
):
    a = chat_tokens(model, "Name three rivers of Europe.")
    config = EngineConfig(n_parallel=1, n_ctx=2048, cache_idle_slots=False)
    with Engine(model, config) as eng:
        run(eng, a)
        run(eng, a[:-3] + model.tokenize("x", add_special=False))  # keeps most of it
        assert eng.cache.stats.saves == 0
        run(eng, chat_tokens(model, "Completely different.", system="Other"))
        assert eng.cache.stats.saves == 1


def test_the_same_prompt_again_saves_nothing(model):
    """Sent again (a retry, a regenerated answer), a prompt cuts only the answer after it:
    saving the slot first would cost more than the warm request (bench/serve.py's warm 1.5k
    request went from 59 to 112 ms with that save)."""
    a = chat_tokens(model, "Name three rivers of Europe.")
    with Engine(model, EngineConfig(n_parallel=1, n_ctx=2048)) as eng:
        run(eng, a)
        again = run(eng, a)
        assert again.usage.cached_tokens == len(a) - 1
        assert eng.cache.stats.saves == 0


def test_conversations_sharing_a_system_prompt_keep_their_tails(model):
    """Three conversations over two slots, all with one system prompt: a request taking
    another conversation's slot keeps most of it (the system prompt), and that slot is still
    saved first, so every second turn finds its whole first turn (llama-server keeps them
    too: it saves each idle slot). Without `cache_idle_slots`, the half rule loses them."""
    system = "You are a helpful assistant who answers every question in one short line."
    firsts = [chat_tokens(model, f"Conversation {n}: name a colour.", system) for n in range(3)]
    for idle in (True, False):
        config = EngineConfig(n_parallel=2, n_ctx=2 * 1024, cache_idle_slots=idle)
        with Engine(model, config) as eng:
            answers = [run(eng, p, max_tokens=8) for p in firsts]
            seconds = [
                p + list(a.token_ids) + model.tokenize(" And another?", add_special=False)
                for p, a in zip(firsts, answers, strict=True)
            ]
            cached = [run(eng, p, max_tokens=4).usage.cached_tokens for p in seconds]
        if idle:
            assert all(c >= len(p) for c, p in zip(cached, firsts, strict=True)), cached
        else:
            assert any(c < len(p) for c, p in zip(cached, firsts, strict=True)), cached


def test_no_cache_idle_slots_leaves_the_slots_children_take(model):
    a = chat_tokens(model, "Name three rivers of Europe.")
    b = model.tokenize("Pick a number.")
    for idle, saves in ((True, 1), (False, 0)):
        config = EngineConfig(n_parallel=2, n_ctx=2 * 1024, cache_idle_slots=idle)
        with Engine(model, config) as eng:
            run(eng, a)  # slot 0
            eng.submit(
                GenerationRequest(b, SamplingParams(temperature=1.0, seed=1), max_tokens=2, n=2)
            ).collect()  # takes both slots: slot 0's KV is needed by a child or the parent
            assert eng.cache.stats.saves == saves


def test_similar_prompts_go_to_the_slot_holding_their_prefix(model):
    with Engine(model, EngineConfig(n_parallel=3, n_ctx=3 * 1024)) as eng:
        # nothing shared between them: each fills its own slot
        prompts = [
            model.tokenize(f"{t} is the topic. Tell me about {t}.")
            for t in ("Cats", "Rain", "Jazz")
        ]
        for p in prompts:
            run(eng, p, max_tokens=2)
        again = run(eng, prompts[0], max_tokens=2)
        assert again.usage.cached_tokens == len(prompts[0]) - 1
        assert eng.cache.stats.restores == 0  # its own slot still held it


def test_a_similar_prompt_leaves_the_conversation_whole_while_a_slot_is_empty(model):
    """B shares A's system prompt: it starts from A's KV, copied to the empty slot, so A's
    next turn still finds every token of A, and both answers equal their cold runs."""
    a = chat_tokens(model, "Name three rivers of Europe.", system="You are terse.")
    b = chat_tokens(model, "Name three lakes of Africa.", system="You are terse.")
    no_ram_cache = EngineConfig(n_parallel=2, n_ctx=2 * 1024, cache_ram_mib=0)
    with Engine(model, no_ram_cache) as eng:  # the slots alone: nothing saved elsewhere
        first = run(eng, a)
        other = run(eng, b)
        a2 = a + list(first.token_ids) + model.tokenize(" And one more?", add_special=False)
        follow = run(eng, a2)
    assert other.usage.cached_tokens == common(a, b) > 0
    assert follow.usage.cached_tokens >= len(a)
    with Engine(model, EngineConfig(n_parallel=1, n_ctx=2048, cache_prompt=False)) as eng:
        assert run(eng, b).token_ids == other.token_ids
        assert run(eng, a2).token_ids == follow.token_ids


def test_the_same_prompt_again_reuses_its_slot_and_answers_alike(model):
    """A regenerated answer cuts only the slot's previous answer: it runs in that slot (no
    copy of its state to an empty one, which cost a warm request ~30 ms) and answers as
    the first time did."""
    prompt = chat_tokens(model, "Name three rivers of Europe.")
    with Engine(model, EngineConfig(n_parallel=2, n_ctx=2 * 1024)) as eng:
        first = run(eng, prompt)
        again = run(eng, prompt)
        holding = [s.seq_id for s in eng._slots if s.kv_tokens]
    assert again.usage.cached_tokens == len(prompt) - 1
    assert holding == [0]  # the other slot stayed empty
    assert again.token_ids == first.token_ids


def test_children_of_n_are_never_cached(model):
    with Engine(model, EngineConfig(n_parallel=3, n_ctx=3 * 1024)) as eng:
        p = chat_tokens(model, "Pick a number.")
        eng.submit(
            GenerationRequest(p, SamplingParams(temperature=1.0, seed=3), max_tokens=4, n=3)
        ).collect()
        busy_kv = [s for s in eng._slots if s.kv_tokens]
        assert len(busy_kv) == 1  # only the parent kept its KV
        for w in ("One", "Two", "Three"):
            run(eng, model.tokenize(f"{w} is a number."), max_tokens=2)
        assert eng.cache.stats.saves <= 1
        assert all(e.tokens[: len(p)] == p for e in eng.cache.entries)


@pytest.mark.slow
def test_decision_models_have_no_cache_unless_asked(tmp_path_factory):
    from llamactl.converters import convert
    from synthetic_checkpoints import cached, write_trunk_copy

    out = tmp_path_factory.mktemp("d1cache")
    gguf = convert(cached(tmp_path_factory, "lfm2-d1"), out / "d1.gguf").outfile
    trunk = out / "trunk.gguf"
    write_trunk_copy(gguf, trunk)
    dm = Model(trunk)
    try:
        assert "decide" in dm.info.capabilities
        with Engine(dm, EngineConfig(n_parallel=1, n_ctx=512)) as eng:
            assert eng.cache is None
            for w in ("a", "b"):
                run(eng, dm.tokenize(f"<|im_start|>user\n{w}<|im_end|>\n"), max_tokens=2)
        with Engine(dm, EngineConfig(n_parallel=1, n_ctx=512, cache_ram_mib=16)) as eng:
            assert eng.cache is not None
    finally:
        dm.close()


def test_concurrent_sessions_with_the_cache_equal_their_solo_runs(model):
    """Four multi-turn chats at once over two slots (so states move through the cache):
    every turn's tokens equal the same turn computed alone in its own slot history."""
    topics = ["cats", "the sea", "jazz", "bread"]

    results: dict[str, list] = {}
    with Engine(model, EngineConfig(n_parallel=2, n_ctx=2 * 2048)) as eng:
        threads = []
        for topic in topics:

            def work(topic: str = topic) -> None:
                results[topic] = session_for(eng, topic)

            threads.append(threading.Thread(target=work))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    with Engine(model, EngineConfig(n_parallel=1, n_ctx=2048, cache_ram_mib=0)) as eng:
        for topic in topics:
            assert results[topic] == session_for(eng, topic), topic


def session_for(engine: Engine, topic: str) -> list[tuple[int, ...]]:
    chat = ChatModel(engine)
    out: list[tuple[int, ...]] = []
    msgs: list[dict] = []
    for turn in range(2):
        msgs.append({"role": "user", "content": f"Tell me about {topic}. Part {turn}."})
        r = chat.start(ChatRequest(list(msgs), sampling=GREEDY, max_tokens=8)).collect()[0]
        out.append(r.done.token_ids)
        msgs.append({"role": "assistant", "content": r.content})
    return out


def test_user_message_spans(model):
    chat_delims = [
        ("assistant", tuple(model.tokenize("<|im_start|>assistant", add_special=False))),
        ("user", tuple(model.tokenize("<|im_start|>user", add_special=False))),
    ]
    text = (
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n"
    )
    tokens = model.tokenize(text, add_special=False)
    spans = split_spans(tokens, chat_delims)
    assert [s.role for s in spans] == ["user", "assistant", "user"]  # system: no delimiter given
    assert spans[0].pos > 0 and sum(s.length for s in spans) == len(tokens) - spans[0].pos
    starts = user_starts(tokens, chat_delims)
    assert model.detokenize(tokens[starts[-1] :], special=True).startswith("<|im_start|>user\nBye")
    assert split_spans(tokens, []) == []
