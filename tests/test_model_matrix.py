"""The engine's promises on every model family (tests/model_matrix.py): exactness under
concurrency, cache isolation, prompt reuse, checkpoints and speculation, each proven on a
dense, a sliding-window, a hybrid, a mixture-of-experts and a vision model, so that no promise
rests on one architecture again.

"Exact" here means token for token what a cold run gives: a fresh one-slot engine with no
prompt cache, the request alone. Each family runs at its default KV type (f16, or bf16 for
hybrid memory): a reused prefix was computed in other chunks than the same prompt cold, and
over f16 the engine resumes where the rows take a cold run's kernels (prompt_chunks.py).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from model_matrix import FAMILIES, GREEDY, Family, load_family, media_of

from llamactl.engine.chat.model import ChatModel, ChatRequest, ChatResult
from llamactl.engine.engine import Engine, EngineConfig
from llamactl.engine.prompt_chunks import MAX_REDO
from llamactl.engine.types import SamplingParams

MODEL_FIXTURES = {"family"}  # fixtures that load a model: users are slow

SLOT_CTX = 2048
MAX_TOKENS = 24
BACKGROUND = "Background: " + " ".join(
    f"note {i} on the migration of arctic terns." for i in range(1, 25)
)
TOPICS = ["cats", "the sea", "Paris", "prime numbers"]


@pytest.fixture(scope="module", params=FAMILIES)
def family(request, tmp_path_factory):
    fam = load_family(request.param, tmp_path_factory)
    yield fam
    fam.model.close()


def open_engine(fam: Family, **kw: Any) -> Engine:
    n_parallel = kw.pop("n_parallel", 4)
    kw.setdefault("cache_ram_mib", 256)
    eng = Engine(fam.model, EngineConfig(n_parallel=n_parallel, n_ctx=n_parallel * SLOT_CTX, **kw))
    if fam.projector is not None:
        eng.attach_projector(fam.projector)
    return eng


class Asker:
    """Requests in the family's way: its sampling, and an image in the first user message of
    conversation k when the family sees."""

    def __init__(self, fam: Family, eng: Engine, sampling: SamplingParams | None = None) -> None:
        self.fam = fam
        self.sampling = sampling or fam.sampling
        self.chat = ChatModel(eng)

    def request(self, messages: list[dict], k: int, **kw: Any) -> ChatRequest:
        media = media_of(self.fam, k)
        if media:
            first = next(i for i, m in enumerate(messages) if m["role"] == "user")
            messages = [dict(m) for m in messages]
            messages[first]["content"] += "\n" + self.chat.media_marker
        kw.setdefault("max_tokens", MAX_TOKENS)
        return ChatRequest(messages, sampling=self.sampling, media=media, **kw)

    def ask(self, messages: list[dict], k: int, **kw: Any) -> ChatResult:
        return self.chat.start(self.request(messages, k, **kw)).collect()[0]

    def together(self, convs: list[tuple[list[dict], int]]) -> list[ChatResult]:
        """All at once, admitted a little apart (the later ones join a running batch)."""
        streams = []
        for messages, k in convs:
            streams.append(self.chat.start(self.request(messages, k)))
            time.sleep(0.02)
        return [s.collect()[0] for s in streams]

    def n_prompt(self, messages: list[dict], k: int) -> int:
        return len(self.chat.render(self.request(messages, k)).tokens)


def cold(
    fam: Family, messages: list[dict], k: int, sampling: SamplingParams | None = None, **kw: Any
) -> list[int]:
    with open_engine(fam, n_parallel=1, cache_ram_mib=0, **kw) as eng:
        return Asker(fam, eng, sampling).ask(messages, k, cache_prompt=False).done.token_ids


def shared(question: str) -> list[dict]:
    return [
        {"role": "system", "content": BACKGROUND},
        {"role": "user", "content": question},
    ]


def short(topic: str) -> list[dict]:
    return [{"role": "user", "content": f"Write two sentences about {topic}."}]


def follow_up(messages: list[dict], answer: ChatResult, text: str) -> list[dict]:
    return [
        *messages,
        {"role": "assistant", "content": answer.content},
        {"role": "user", "content": text},
    ]


def test_concurrent_requests_answer_as_alone(family):
    convs = [
        (shared("What is note 3 about?"), 0),
        (shared("Which note comes after note 7?"), 1),
        (short(TOPICS[0]), 2),
        (short(TOPICS[1]), 3),
    ]
    alone = [cold(family, m, k) for m, k in convs]
    with open_engine(family) as eng:
        asker = Asker(family, eng)
        first = asker.together(convs)
        second = asker.together(convs)  # warm: each finds its prompt in a slot or the cache
    for i, (a, b, c) in enumerate(zip(alone, first, second, strict=True)):
        assert b.done.token_ids == a, f"conversation {i} differs in company"
        assert c.done.token_ids == a, f"conversation {i} differs in company, warm"
    assert all(r.done.usage.cached_tokens > 0 for r in second)


def test_conversations_sharing_a_prefix_keep_their_own_state(family):
    """Two conversations share a long prefix; each continues on its own state whether they
    run one after the other or at once, and whatever the other left in the slots."""
    a, b = shared("What is note 3 about?"), shared("Which note comes after note 7?")
    with open_engine(family) as eng:
        asker = Asker(family, eng)
        ra = asker.ask(a, 0)
        rb = asker.ask(b, 1)
        assert rb.done.usage.cached_tokens > 0  # b reused a's prefix
        a2, b2 = follow_up(a, ra, "And note 4?"), follow_up(b, rb, "And the one before?")
        c = shared("How many notes are there?")
        together = asker.together([(a2, 0), (b2, 1), (c, 2)])
        n_a, n_b = asker.n_prompt(a, 0), asker.n_prompt(b, 1)
    assert ra.done.token_ids == cold(family, a, 0)
    assert rb.done.token_ids == cold(family, b, 1)
    for i, (messages, k) in enumerate([(a2, 0), (b2, 1), (c, 2)]):
        assert together[i].done.token_ids == cold(family, messages, k), f"conversation {i}"
    assert together[0].done.usage.cached_tokens >= n_a // 2
    assert together[1].done.usage.cached_tokens >= n_b // 2


def test_the_same_prompt_again_reuses_all_but_its_tail(family):
    """llama-server reuses 64 of a repeated 69-token prompt on Gemma 3: at least as much."""
    messages = shared("What is note 3 about?")
    with open_engine(family) as eng:
        asker = Asker(family, eng)
        n = asker.n_prompt(messages, 0)
        first = asker.ask(messages, 0)
        again = asker.ask(messages, 0)
    # trimmable memory keeps all but the last token; the others roll back to the checkpoint
    # taken 4 tokens before the prompt's end
    assert again.done.usage.cached_tokens >= n - (1 if family.can_trim else 4)
    assert again.done.token_ids == first.done.token_ids


def test_a_follow_up_turn_reuses_the_conversation(family):
    messages = shared("What is note 3 about?")
    with open_engine(family) as eng:
        asker = Asker(family, eng)
        first = asker.ask(messages, 0)
        turn2 = follow_up(messages, first, "And note 4?")
        second = asker.ask(turn2, 0)
        # over f16 an exact resume decodes up to MAX_REDO rows of the first turn again
        assert second.done.usage.cached_tokens >= asker.n_prompt(messages, 0) - MAX_REDO
    assert second.done.token_ids == cold(family, turn2, 0)


def test_an_edited_message_rolls_back_exactly(family):
    """Memory that cannot be trimmed rolls back to the checkpoint before the last user
    message; trimmable memory keeps the whole shared prefix."""
    messages = shared("What is note 3 about?")
    edited = shared("What is note 5 about?")
    with open_engine(family) as eng:
        asker = Asker(family, eng)
        asker.ask(messages, 0)
        r = asker.ask(edited, 0)
    assert r.done.usage.cached_tokens > 0
    assert r.done.token_ids == cold(family, edited, 0)


def test_a_state_from_the_prompt_cache_continues_exactly(family):
    """One slot: another conversation takes it, the first comes back from the RAM cache."""
    a = shared("What is note 3 about?")
    with open_engine(family, n_parallel=1) as eng:
        asker = Asker(family, eng)
        ra = asker.ask(a, 0)
        asker.ask(short(TOPICS[2]), 1)
        a2 = follow_up(a, ra, "And note 4?")
        r = asker.ask(a2, 0)
        assert eng.cache is not None and eng.cache.stats.restores >= 1
        assert r.done.usage.cached_tokens >= asker.n_prompt(a, 0) // 2
    assert r.done.token_ids == cold(family, a2, 0)


def test_speculation_changes_no_answer(family):
    """Drafts verified in the batch never change an answer. Families whose memory cannot
    drop a rejected draft (recurrent and hybrid: a state has no tail to drop) run without
    speculation, and say so; so does a sliding window over f16 (context.ChatPlan), which
    speculates over bf16. Greedy for every family: a random
    model then repeats itself, which is what n-gram drafts feed on."""
    convs = [
        ([{"role": "user", "content": "Repeat: one two three four one two three four one two"}], 0),
        (short(TOPICS[3]), 1),
        (shared("List the notes from 1 to 5."), 2),
    ]
    alone = [cold(family, m, k, GREEDY) for m, k in convs]
    with open_engine(family, spec_types=["ngram-simple"]) as eng:
        speculating = bool(eng.speculators)
        together = Asker(family, eng, GREEDY).together(convs)
        drafted = sum(s.stats.drafted for s in eng.speculators)
    assert speculating == family.speculates
    if speculating:
        assert drafted > 0
    for i, (a, r) in enumerate(zip(alone, together, strict=True)):
        assert r.done.token_ids == a, f"conversation {i}"
    if family.can_trim and not speculating:  # the sliding window: over bf16 it drafts
        bf16 = {"kv_type": "bf16"}
        alone = [cold(family, m, k, GREEDY, **bf16) for m, k in convs]
        with open_engine(family, spec_types=["ngram-simple"], **bf16) as eng:
            together = Asker(family, eng, GREEDY).together(convs)
            assert sum(s.stats.drafted for s in eng.speculators) > 0
        for i, (a, r) in enumerate(zip(alone, together, strict=True)):
            assert r.done.token_ids == a, f"conversation {i} over bf16"
