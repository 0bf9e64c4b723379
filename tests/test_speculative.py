"""Speculative decoding on the real embedded model: every speculator gives exactly the tokens of
a run without speculation, at 1 and 4 slots, and its acceptance counters move."""

from __future__ import annotations

import pytest

from llamactl.core.errors import InvalidRequestError
from llamactl.engine.engine import Engine, EngineConfig, GenerationRequest
from llamactl.engine.model import Model
from llamactl.engine.prompt_chunks import MAX_REDO
from llamactl.engine.speculative import (
    NgramCache,
    NgramMod,
    NgramSimple,
    SeqState,
    parse_spec_types,
)
from llamactl.engine.types import SamplingParams, TextDelta
from llamactl.models import embedded_model_path

MODEL_FIXTURES = {"baseline", "model"}  # fixtures that load a model: users are slow

GREEDY = SamplingParams(temperature=0.0)
SEEDED = SamplingParams(temperature=0.9, seed=7)
CODE = """def add(a, b):
    return a + b

def mul(a, b):
    result = 0
    for i in range(b):
        result = add(result, a)
    return result
"""
TASKS = ["with type hints", "with docstrings", "in one line each", "with comments"]


@pytest.fixture(scope="module")
def model() -> Model:
    return Model(embedded_model_path())


def prompts(model: Model) -> list[list[int]]:
    return [
        model.tokenize(
            f"<|im_start|>user\nRewrite this code {task}:\n{CODE}<|im_end|>\n"
            "<|im_start|>assistant\n",
            add_special=False,
        )
        for task in TASKS
    ]


def run_all(engine: Engine, ps: list[list[int]], sampling=GREEDY, max_tokens: int = 40):
    streams = [
        engine.submit(GenerationRequest(p, sampling, max_tokens=max_tokens, cache_prompt=False))
        for p in ps
    ]
    return [s.collect()[1][0] for s in streams]


def make(model: Model, n_parallel: int, types: tuple[str, ...] = (), **kw) -> Engine:
    if "draft-simple" in types:
        kw.setdefault("model_draft", embedded_model_path())  # its own draft: valid, if slow
    config = EngineConfig(
        n_parallel=n_parallel,
        n_ctx=n_parallel * 1024,
        cache_ram_mib=kw.pop("cache_ram_mib", 0),
        spec_types=types,
        spec_draft_n_max=kw.pop("n_max", 6),
        # always draft n_max tokens: the cost-aware length depends on this machine's timings
        spec_adaptive=kw.pop("spec_adaptive", False),
        **kw,
    )
    return Engine(model, config)


@pytest.fixture(scope="module")
def baseline(model):
    with make(model, 4) as eng:
        return {
            "greedy": [d.token_ids for d in run_all(eng, prompts(model))],
            "seeded": [d.token_ids for d in run_all(eng, prompts(model)[:2], SEEDED)],
        }


@pytest.mark.parametrize(
    "types", [("ngram-simple",), ("ngram-mod",), ("ngram-cache",), ("draft-simple",)]
)
@pytest.mark.parametrize("n_parallel", [1, 4])
def test_speculation_gives_the_same_tokens(model, baseline, types, n_parallel):
    ps = prompts(model)
    with make(model, n_parallel, types) as eng:
        dones = run_all(eng, ps)
        assert [d.token_ids for d in dones] == baseline["greedy"]
        spec = eng.speculators[0]
        assert spec.name == types[0]
        if types not in (("ngram-cache",), ("ngram-mod",)):  # may not have seen enough yet
            assert spec.stats.drafts > 0 and spec.stats.accepted > 0
        assert sum(d.timings.draft_n for d in dones) == spec.stats.drafted
        assert sum(d.timings.draft_n_accepted for d in dones) == spec.stats.accepted
        for d in dones:
            assert d.usage.completion_tokens == len(d.token_ids) <= 40


def test_all_speculators_chained_at_four_slots(model, baseline):
    types = ("ngram-simple", "ngram-cache", "draft-simple")
    with make(model, 4, types) as eng:
        assert [d.token_ids for d in run_all(eng, prompts(model))] == baseline["greedy"]
        assert sum(s.stats.drafts for s in eng.speculators) > 0


def test_seeded_sampling_is_unchanged_by_speculation(model, baseline):
    with make(model, 2, ("ngram-simple",)) as eng:
        dones = run_all(eng, prompts(model)[:2], SEEDED)
    assert [d.token_ids for d in dones] == baseline["seeded"]


def test_max_tokens_and_stops_are_exact_with_drafts(model):
    p = prompts(model)[0]
    with make(model, 1, ("ngram-simple",), n_max=8) as eng:
        for limit in (1, 3, 7):
            d = run_all(eng, [p], max_tokens=limit)[0]
            assert d.usage.completion_tokens == limit and d.finish_reason == "length"
        text, dones = eng.submit(
            GenerationRequest(p, GREEDY, max_tokens=60, stop=("return",), cache_prompt=False)
        ).collect()
        assert dones[0].finish_reason == "stop" and "return" not in text[0]
    with make(model, 1) as eng:
        plain, _ = eng.submit(
            GenerationRequest(p, GREEDY, max_tokens=60, stop=("return",), cache_prompt=False)
        ).collect()
    assert text == plain


def test_no_speculation_reports_no_draft_timings(model):
    with make(model, 1) as eng:
        d = run_all(eng, prompts(model)[:1], max_tokens=2)[0]
    assert d.timings.draft_n is None and "draft_n" not in d.timings.as_dict()


def test_prompt_lookup_and_ngram_cache_drafts():
    seq = SeqState()
    history = [1, 2, 3, 4, 5, 9, 9, 1, 2, 3]
    assert NgramSimple().draft(seq, history, 3) == [4, 5, 9]
    assert NgramSimple().draft(SeqState(), [1, 2, 3], 3) == []
    cache = NgramCache(min_hits=2)
    text = [7, 8, 9, 10] * 3 + [7, 8]
    assert cache.draft(SeqState(), text, 4) == [9, 10, 7, 8]


def _llama_cpp_hash(tokens: list[int], size: int) -> int:
    """common_ngram_mod::idx, written out: the tokens as digits, modulo 2^64 and the size."""
    res = 0
    for t in tokens:
        res = (res * 6364136223846793005 + t) % 2**64
    return res % size


def test_ngram_mod_uses_llama_cpps_table_and_drafts_long_matches_only():
    mod = NgramMod(n_match=4, n_min=3, n_max=64)
    assert mod.n_max == 48  # a draft and its row stay under one flash-attention kernel
    text = list(range(100, 120))
    seq = SeqState()
    # the text, then its start again: the draft is the rest of the text
    draft = mod.draft(seq, text + text[:4], 6)
    assert draft == text[4:10]
    # every n-gram sits where llama.cpp's hash puts it, holding the token that followed it
    for i in range(len(text) - 4):
        assert mod.table[_llama_cpp_hash(text[i : i + 4], mod.size)] == text[i + 4]
    # the history grows token by token (the rolling hash), and the n-grams after it too
    grown = text + text[:4] + [555, 556, 557, 558, 559]
    assert mod.draft(seq, grown, 6) == []  # 556..559 were never followed by anything yet
    assert mod.table[_llama_cpp_hash([text[3], 555, 556, 557], mod.size)] == 558
    # a window seen nowhere drafts nothing; a seen one follows the table to n_max
    fresh = NgramMod(n_match=2, n_min=5, n_max=8)
    assert fresh.draft(SeqState(), [1, 2, 3, 4, 5, 6, 7, 8, 9], 8) == []
    assert fresh.draft(SeqState(), [1, 2, 3, 4, 5, 6, 7, 1, 2], 8) == [3, 4, 5, 6, 7, 1, 2, 3]


def test_ngram_mod_forgets_its_table_after_five_poor_drafts_in_a_row():
    mod = NgramMod(n_match=2, n_min=1, n_max=8)
    seq = SeqState()
    assert mod.draft(seq, [1, 2, 3, 1, 2], 4)
    for _ in range(5):
        assert mod.used > 0
        mod.record(seq, 8, 1)
    assert mod.used == 0 and seq.hashed == 0 and (mod.table == -1).all()


def test_the_speculator_with_the_better_record_wins():
    good, bad = NgramSimple(), NgramCache()
    seq = SeqState()
    for _ in range(5):
        good.record(seq, 4, 4)
        bad.record(seq, 4, 0)
    assert good.rate(seq) * 3 > bad.rate(seq) * 6  # a short good draft beats a long bad one


def test_spec_types_are_validated(model):
    assert parse_spec_types(["draft-simple", "ngram-simple", "none"]) == (
        "ngram-simple",
        "draft-simple",
    )
    with pytest.raises(InvalidRequestError, match="unknown speculator"):
        parse_spec_types(["ngram-magic"])
    with pytest.raises(InvalidRequestError, match="--model-draft"):
        Engine(model, EngineConfig(n_parallel=1, n_ctx=512, spec_types=("draft-simple",)))


def test_long_context_drafts_give_the_same_logits(model):
    """Past 256 tokens of context (where an f16 cache switches flash-attention kernels between
    one-row and several-row decodes), drafted and plain runs agree to the last bit: the
    log-probability of every token is the same float."""
    p = model.tokenize(
        "<|im_start|>user\nRewrite this code with the name `data` changed to `rows`:\n"
        + CODE * 7
        + "<|im_end|>\n<|im_start|>assistant\n",
        add_special=False,
    )
    assert len(p) > 300

    def logprobs(engine: Engine, company: list[list[int]]) -> tuple[list[float], object]:
        streams = [
            engine.submit(
                GenerationRequest(q, GREEDY, max_tokens=40, logprobs=0, cache_prompt=False)
            )
            for q in [p, *company]
        ]
        values = [
            lp[0].logprob for e in streams[0] if isinstance(e, TextDelta) for lp in e.logprobs
        ]
        for s in streams[1:]:
            s.collect()
        return values, streams[0].done[0]

    with make(model, 1) as eng:
        plain, plain_done = logprobs(eng, [])
    with make(model, 2, ("ngram-simple",), n_max=8) as eng:
        drafted, done = logprobs(eng, [prompts(model)[0]])
    assert done.timings.draft_n > 0
    assert done.token_ids == plain_done.token_ids
    assert drafted == plain


def test_cost_aware_drafts_keep_the_tokens_and_stop_at_unprofitable_positions(model, baseline):
    with make(model, 4, ("ngram-simple",), spec_adaptive=True) as eng:
        assert [d.token_ids for d in run_all(eng, prompts(model))] == baseline["greedy"]
        eng.drafting.timing.update(step=0.01, step_n=5, row=0.004, row_n=5)  # a row costs 0.4 step
        assert eng.drafting.worth_drafting([0.9, 0.6, 0.45, 0.3], 4, 1) == 3
        assert eng.drafting.worth_drafting([0.2, 0.1], 2, 1) == 0
        assert eng.drafting.worth_drafting([0.2, 0.1], 2, 8) == 1  # a probe now and then


def test_survival_follows_all_or_nothing_drafts():
    spec = NgramSimple()
    for _ in range(20):
        spec.record(SeqState(), 4, 4)
        spec.record(SeqState(), 4, 0)
    first, *rest = spec.survival(4)
    assert 0.4 < first < 0.6 and rest[-1] > 0.4  # once the first is kept, the rest follow


def test_the_draft_models_sequence_travels_with_a_cached_state(model):
    ps = prompts(model)

    def run(engine: Engine, prompt: list[int]):
        return engine.submit(GenerationRequest(prompt, GREEDY, max_tokens=8)).collect()[1][0]

    config = dict(cache_ram_mib=64, model_draft=embedded_model_path())
    with make(model, 1, ("draft-simple",), **config) as eng:
        first = run(eng, ps[0])
        run(eng, model.tokenize("Something else. " * 3))
        entry = eng.cache.entries[0]
        assert entry.draft_state is not None and entry.draft_tokens
        follow = ps[0] + list(first.token_ids[:-1])
        again = run(eng, follow)
        # the state comes back from the cache; the answer's rows (made row by row) and enough
        # before them for a tiled chunk are decoded again, as cold (prompt_chunks.py)
        assert again.usage.cached_tokens >= len(follow) - 1 - MAX_REDO
        assert eng.cache.stats.restores == 1
        drafter = eng.speculators[0]
        assert drafter.tokens[0][: len(entry.draft_tokens) - 8] == entry.draft_tokens[:-8]


def test_ngram_mod_drafts_a_copy_and_keeps_the_tokens(model, baseline):
    """Short n-grams (llama-server's defaults want 24-token matches and 48-token drafts, more
    than these prompts give) so the real model's copy of the code is drafted and verified."""
    ps = prompts(model)
    with make(
        model,
        4,
        ("ngram-mod",),
        spec_ngram_mod_n_match=4,
        spec_ngram_mod_n_min=2,
        spec_ngram_mod_n_max=12,
    ) as eng:
        dones = run_all(eng, ps)
        spec = eng.speculators[0]
    assert [d.token_ids for d in dones] == baseline["greedy"]
    assert spec.stats.drafts > 0 and spec.stats.accepted > 0
    assert sum(d.timings.draft_n_accepted for d in dones) == spec.stats.accepted
