"""Exactness over an f16 KV cache: where llama.cpp computes a row alone, and the companion rows
that keep such a row on the kernel every batched row takes.

The unit half checks the micro-batch prediction against llama.cpp's splitting rules; the real
half checks, on the embedded model, that the prediction matches what llama.cpp does (without
companions a lone decode past 256 cells gives other logits; with them the same floats), and the
guarantee users rely on: 8 concurrent greedy streams of 512 tokens equal their solo runs at the
default settings, with and without speculation.
"""

from __future__ import annotations

import time

import pytest

from llamactl.engine.engine import Engine, EngineConfig, GenerationRequest
from llamactl.engine.model import Model
from llamactl.engine.types import SamplingParams, TextDelta
from llamactl.engine.ubatch import lone_rows, plan_companions, split
from llamactl.models import embedded_model_path

GREEDY = SamplingParams(temperature=0.0)


# ------------------------------------------------------------------ the split rules
def test_one_stream_is_cut_in_order():
    assert split([0, 0, 0, 0, 0], 2, streams=False) == [[0, 1], [2, 3], [4]]


def test_consecutive_sequences_share_a_micro_batch():
    assert split([0, 1, 2], 512, streams=True) == [[0, 1, 2]]


def test_a_gap_between_sequences_splits_them():
    # llama.cpp's sequential split takes only increasing, consecutive sequence ids
    assert split([0, 2, 5], 512, streams=True) == [[0], [1], [2]]
    assert split([0, 2, 1], 512, streams=True) == [[0, 2], [1]]


def test_sequences_advance_together_and_the_rest_is_left_over():
    # seq 0 has one row, seq 1 three: one row each, then seq 1's two left alone
    assert split([0, 1, 1, 1], 512, streams=True) == [[0, 1], [2, 3]]
    assert split([0, 1, 1], 512, streams=True) == [[0, 1], [2]]


def test_micro_batch_size_bounds_rows_per_sequence():
    assert split([0, 0, 0, 1, 1, 1], 4, streams=True) == [[0, 1, 3, 4], [2, 5]]


def test_lone_rows_only_count_past_256_cells():
    assert lone_rows([0], [255], 512, streams=False) == []
    assert lone_rows([0], [256], 512, streams=False) == [0]
    assert lone_rows([0, 1], [300, 300], 512, streams=True) == []
    assert lone_rows([0, 2], [300, 10], 512, streams=True) == [0]


def _plan(seqs, pos, *, n_seqs=4, kv=None, streams=True, n_ubatch=512):
    kv = kv or {}
    return plan_companions(
        seqs,
        pos,
        n_ubatch,
        streams=streams,
        n_seqs=n_seqs,
        next_pos=lambda s: kv.get(s, 0),
        room=8,
    )


def test_a_lone_row_gets_the_next_sequence_as_companion_when_that_one_is_shorter():
    assert _plan([1], [300], kv={2: 10}) == [(2, 10)]
    after = _plan([1], [300], kv={2: 10})
    assert lone_rows([1, 2], [300, 10], 512, streams=True) == []
    assert after


def test_a_lone_row_of_the_last_slot_or_one_stream_takes_its_own_next_position():
    assert _plan([3], [300]) == [(3, 301)]
    assert _plan([0], [300], streams=False, n_seqs=1) == [(0, 301)]
    assert _plan([1], [300], kv={2: 400}) == [(1, 301)]  # the neighbour holds more cells


def test_a_one_slot_engine_hosts_its_companion_in_the_spare_sequence():
    plan = plan_companions(
        [0], [300], 512, streams=False, n_seqs=1, next_pos=lambda s: 0, room=8, spare=1
    )
    assert plan == [(1, 0)]
    assert lone_rows([0, 1], [300, 0], 512, streams=False) == []


def test_no_companion_where_no_row_is_alone():
    assert _plan([0, 1], [300, 300]) == []
    assert _plan([0], [100]) == []


def test_every_lone_row_is_settled():
    seqs, pos = [0, 2, 2], [300, 400, 401]  # seq 0 alone; seq 2's two rows together
    plan = _plan(seqs, pos, kv={1: 0, 3: 0})
    grown_s = seqs + [s for s, _ in plan]
    grown_p = pos + [p for _, p in plan]
    assert [r for r in lone_rows(grown_s, grown_p, 512, streams=True) if r < 3] == []


# ------------------------------------------------------------------ the real engine
@pytest.fixture(scope="module")
def model() -> Model:
    return Model(embedded_model_path())


def chat(model: Model, text: str) -> list[int]:
    return model.tokenize(
        f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n", add_special=False
    )


STORY = "Once upon a time a cat and a dog lived in a small house by the sea. "


def _logprobs(engine: Engine, prompt: list[int], n: int) -> list[float]:
    stream = engine.submit(
        GenerationRequest(prompt, GREEDY, max_tokens=n, logprobs=0, ignore_eos=True)
    )
    return [lp[0].logprob for e in stream if isinstance(e, TextDelta) for lp in e.logprobs]


@pytest.mark.slow
def test_default_kv_is_f16_with_companions(model):
    with Engine(model, EngineConfig(n_parallel=2, n_ctx=2 * 1024)) as eng:
        assert eng.kv_type == "f16"
        assert eng.n_ctx_slot == 1023  # one cell held back for a companion


@pytest.mark.slow
@pytest.mark.parametrize("slots", [2, 3], ids=["own-row", "neighbour-row"])
def test_a_lone_decode_needs_its_companion(model, slots):
    """The prediction matches llama.cpp: with companions off, a lone decode past 256 cells
    of an f16 cache gives other log-probabilities than the same decode in company; on, the
    very same floats, whether the companion is a row of the same sequence (the last slot) or
    of the next, idle one."""
    long = chat(model, STORY * 18 + "Continue the story.")
    assert len(long) > 300
    other = chat(model, "Write two sentences about the sea.")

    def in_company(eng: Engine) -> list[float]:
        company = eng.submit(GenerationRequest(other, GREEDY, max_tokens=400, ignore_eos=True))
        values = _logprobs(eng, long, 24)
        company.collect()
        return values

    with Engine(model, EngineConfig(n_parallel=slots, n_ctx=slots * 1024, kv_type="f16")) as eng:
        together = in_company(eng)
        alone = _logprobs(eng, long, 24)
        eng._companions = False
        bare = _logprobs(eng, long, 24)
    assert alone == together
    assert bare != together


@pytest.mark.slow
def test_a_one_slot_engine_decodes_as_a_slot_in_company(model):
    """A one-slot engine has no neighbour: its companions go to a spare sequence of its one
    KV stream (cheaper than a second row of its own sequence). The floats are those of a
    slot in company, so drafts (always in company) cannot change its answers."""
    long = chat(model, STORY * 18 + "Continue the story.")
    other = chat(model, "Write two sentences about the sea.")
    with Engine(model, EngineConfig(n_parallel=2, n_ctx=2 * 1024, kv_type="f16")) as eng:
        company = eng.submit(GenerationRequest(other, GREEDY, max_tokens=400, ignore_eos=True))
        together = _logprobs(eng, long, 24)
        company.collect()
    with Engine(model, EngineConfig(n_parallel=1, n_ctx=1024)) as eng:
        assert eng.n_ctx_slot == 1023
        alone = _logprobs(eng, long, 24)
    assert alone == together


def _copy_prompts(model: Model) -> list[list[int]]:
    code = "def add(a, b):\n    return a + b\n\ndef mul(a, b):\n    return a * b\n"
    asks = [("Rewrite this code with comments:\n" + code * k) for k in (1, 3)] + [
        STORY * k + "Continue the story." for k in (1, 4, 9)
    ]
    asks += [f"Write a long essay about {t}." for t in ("cats", "rain", "jazz")]
    return [chat(model, a) for a in asks]


@pytest.mark.slow
@pytest.mark.parametrize(
    "spec", [(), ("ngram-simple",), ("ngram-mod",)], ids=["plain", "ngram", "ngram-mod"]
)
def test_eight_streams_of_512_tokens_equal_their_solo_runs(model, spec):
    """The guarantee at the default settings: long enough to pass 512 cells, mixed prompt
    lengths, staggered admission, with and without speculation."""
    prompts = _copy_prompts(model)
    assert len(prompts) == 8

    def request(p: list[int]) -> GenerationRequest:
        return GenerationRequest(p, GREEDY, max_tokens=512, ignore_eos=True, cache_prompt=False)

    # ngram-mod with 12-token matches and drafts of 16 to 48 rows, so it drafts here
    mod = {"spec_ngram_mod_n_match": 12, "spec_ngram_mod_n_min": 16}
    config = EngineConfig(n_parallel=8, spec_types=spec, **(mod if "ngram-mod" in spec else {}))
    with Engine(model, config) as eng:
        solo = [eng.submit(request(p)).collect()[1][0].token_ids for p in prompts]
        streams = []
        for p in prompts:
            streams.append(eng.submit(request(p)))
            time.sleep(0.05)
        together = [s.collect()[1][0].token_ids for s in streams]
        drafted = sum(s.stats.accepted for s in eng.speculators)
    assert drafted > 0 or not spec
    for k, (alone, batched) in enumerate(zip(solo, together, strict=True)):
        assert len(alone) == 512
        assert batched == alone, k
