"""Context checkpoints on a tiny hybrid LFM2 (short convolutions + attention) GGUF built by
the project's converter: such a model cannot trim its memory, so a diverging prompt rolls back
to the checkpoint before its last user message; outputs equal cold runs."""

from __future__ import annotations

import pytest
from llamactl.converters import convert
from synthetic_checkpoints import cached, write_trunk_copy

from llamactl.engine.chat.model import ChatModel, ChatRequest
from llamactl.engine.chat.spans import user_starts
from llamactl.engine.engine import Engine, EngineConfig
from llamactl.engine.model import Model
from llamactl.engine.types import SamplingParams

MODEL_FIXTURES = {"lfm2"}  # fixtures that load a model: users are slow

# Seeded sampling rather than greedy: the tiny random model's argmax repeats one token, while
# seeded draws from identical logits give varied, still reproducible tokens.
SEEDED = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=11)


@pytest.fixture(scope="module")
def lfm2(tmp_path_factory) -> Model:
    """The LFM2 trunk of the converted lfm2-d1 checkpoint: a plain `lfm2` causal LM."""
    out = tmp_path_factory.mktemp("lfm2")
    gguf = convert(cached(tmp_path_factory, "lfm2-d1"), out / "d1.gguf").outfile
    write_trunk_copy(gguf, out / "lfm2.gguf")
    model = Model(out / "lfm2.gguf")
    assert model.info.architecture == "lfm2" and model.info.is_hybrid
    yield model
    model.close()


def engine(model: Model, **kw) -> Engine:
    kw.setdefault("cache_ram_mib", 64)  # a decision-type GGUF: the cache is off unless asked
    return Engine(model, EngineConfig(n_parallel=kw.pop("n_parallel", 1), n_ctx=2048, **kw))


def ask(chat: ChatModel, messages: list[dict], **kw):
    req = ChatRequest(messages, sampling=SEEDED, max_tokens=6, **kw)
    return chat.start(req).collect()[0]


def cold(model: Model, messages: list[dict]):
    with engine(model, cache_ram_mib=0) as eng:
        return ask(ChatModel(eng), messages, cache_prompt=False)


def turn1() -> list[dict]:
    return [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hello there"},
    ]


def test_follow_up_turn_reuses_the_conversation(lfm2):
    with engine(lfm2) as eng:
        chat = ChatModel(eng)
        first = ask(chat, turn1())
        follow = [
            *turn1(),
            {"role": "assistant", "content": first.content},
            {"role": "user", "content": "and then?"},
        ]
        second = ask(chat, follow)
        assert second.done.usage.cached_tokens > len(chat.render(ChatRequest(turn1())).tokens) // 2
        assert eng.stats.checkpoints_made >= 1
    assert second.done.token_ids == cold(lfm2, follow).done.token_ids


def test_edited_last_message_rolls_back_to_its_checkpoint(lfm2):
    with engine(lfm2) as eng:
        chat = ChatModel(eng)
        ask(chat, turn1())
        edited = [*turn1()[:-1], {"role": "user", "content": "hello world"}]
        rendered = chat.render(ChatRequest(edited))
        r = ask(chat, edited)
        last_user = user_starts(rendered.tokens, chat._delimiters)[-1]
        assert r.done.usage.cached_tokens == last_user > 0
    assert r.done.token_ids == cold(lfm2, edited).done.token_ids


def test_regenerating_the_same_prompt_reuses_all_but_its_tail(lfm2):
    with engine(lfm2) as eng:
        chat = ChatModel(eng)
        n = len(chat.render(ChatRequest(turn1())).tokens)
        ask(chat, turn1())
        again = ask(chat, turn1())
        assert again.done.usage.cached_tokens == n - 4
    assert again.done.token_ids == cold(lfm2, turn1()).done.token_ids


def test_checkpoints_travel_with_a_cached_state(lfm2):
    """One slot: another chat takes it, the first comes back edited from the cache and still
    rolls back to its checkpoint."""
    with engine(lfm2) as eng:
        chat = ChatModel(eng)
        ask(chat, turn1())
        ask(chat, [{"role": "user", "content": "something unrelated and longer"}])
        assert eng.cache.stats.saves == 1
        edited = [*turn1()[:-1], {"role": "user", "content": "hello world"}]
        r = ask(chat, edited)
        assert eng.cache.stats.restores == 1 and r.done.usage.cached_tokens > 0
    assert r.done.token_ids == cold(lfm2, edited).done.token_ids


def test_without_checkpoints_a_diverging_prompt_starts_over(lfm2):
    with engine(lfm2, ctx_checkpoints=0) as eng:
        chat = ChatModel(eng)
        ask(chat, turn1())
        r = ask(chat, [*turn1()[:-1], {"role": "user", "content": "hello world"}])
        assert r.done.usage.cached_tokens == 0 and eng.stats.checkpoints_made == 0


def test_a_similar_conversation_leaves_the_other_whole_on_the_hybrid_model(lfm2):
    """Without trimming, a cut slot would roll back to a checkpoint: B's prompt runs on a copy
    of A's state (in the empty slot), so A's follow-up still reuses more than the rollback."""
    a = turn1()
    b = [a[0], {"role": "user", "content": "hello where"}]
    with engine(lfm2, n_parallel=2) as eng:
        chat = ChatModel(eng)
        first = ask(chat, a)
        other = ask(chat, b)
        answer = {"role": "assistant", "content": first.content}
        a2 = [*a, answer, {"role": "user", "content": "ok"}]
        follow = ask(chat, a2)
        n_a = len(chat.render(ChatRequest(a)).tokens)
    assert other.done.usage.cached_tokens > 0
    assert follow.done.usage.cached_tokens >= n_a
    assert other.done.token_ids == cold(lfm2, b).done.token_ids
    assert follow.done.token_ids == cold(lfm2, a2).done.token_ids


def test_concurrent_conversations_on_the_hybrid_model_equal_cold_runs(lfm2):
    convs = [
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": f"topic {k}"}]
        for k in range(4)
    ]
    with engine(lfm2, n_parallel=4) as eng:
        chat = ChatModel(eng)
        firsts = [chat.start(ChatRequest(c, sampling=SEEDED, max_tokens=6)) for c in convs]
        results = [s.collect()[0] for s in firsts]
        edits = [[c[0], {"role": "user", "content": c[1]["content"] + "!"}] for c in convs]
        seconds = [chat.start(ChatRequest(e, sampling=SEEDED, max_tokens=6)) for e in edits]
        again = [s.collect()[0] for s in seconds]
    assert all(r.done.usage.cached_tokens > 0 for r in again)
    for conv, edit, r1, r2 in zip(convs, edits, results, again, strict=True):
        assert r1.done.token_ids == cold(lfm2, conv).done.token_ids
        assert r2.done.token_ids == cold(lfm2, edit).done.token_ids
