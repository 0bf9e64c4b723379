"""A prompt whose prefix is cached answers as the same prompt cold, over the default f16
cache (llamactl/engine/prompt_chunks.py): the rows a cold run decodes with ggml's tiled
attention kernel are tiled warm too."""

from __future__ import annotations

import pytest

from llamactl.engine.chat.model import ChatModel, ChatRequest
from llamactl.engine.engine import Engine, EngineConfig
from llamactl.engine.model import Model
from llamactl.engine.prompt_chunks import (
    EXACT_PIECE,
    chunk_rows,
    cold_tiled,
    cut_rows,
    exact_resume,
)
from llamactl.engine.types import SamplingParams
from llamactl.models import embedded_model_path

MODEL_FIXTURES = {"model"}
GREEDY = SamplingParams(temperature=0.0)


def chunks(start: int, n_prompt: int, budget: int) -> list[int]:
    out, pos = [], start
    while pos < n_prompt:
        take = chunk_rows(pos, n_prompt, n_prompt, budget)
        out.append(take)
        pos += take
    return out


@pytest.mark.parametrize("n_prompt", [10, 64, 65, 200, 508, 509, 540, 571, 572, 1100])
@pytest.mark.parametrize("start", [0, 3, 100, 450])
def test_every_row_but_the_last_is_tiled_when_its_piece_is_long_enough(n_prompt, start):
    if start >= n_prompt:
        return
    sizes = chunks(start, n_prompt, budget=508)
    assert sum(sizes) == n_prompt - start
    if n_prompt - 1 - start >= EXACT_PIECE:
        assert sizes[-1] == 1  # the last row on its own
        assert all(EXACT_PIECE <= s <= 508 for s in sizes[:-1])
    else:
        assert all(s < EXACT_PIECE for s in sizes)


def test_a_cached_prefix_ends_early_enough_for_a_tiled_tail():
    cold = cold_tiled(300)
    assert cold == [(0, 299)]
    # the slot holds another prompt's 290 tiled rows; this prompt shares 280 of them
    assert exact_resume(280, 300, [(0, 290)]) == 299 - EXACT_PIECE
    # enough rows left after the prefix: nothing is decoded again
    assert exact_resume(200, 300, [(0, 290)]) == 200
    # the same prompt again: only its last row
    assert exact_resume(400, 300, [(0, 299)]) == 299


def test_rows_not_made_as_cold_are_decoded_again_within_a_bound():
    # a short prompt's template header (row by row) under a long prompt: decoded again
    assert exact_resume(3, 300, []) == 0
    # a short prompt (row by row) and its answer, then a follow-up long enough to be tiled:
    # the conversation's reuse is kept
    assert exact_resume(50, 90, []) == 50
    # a 300-row prompt and a 200-token answer, then a follow-up: too much to decode again
    assert exact_resume(500, 540, [(0, 299)]) == 500
    # a state from a file: kernels unknown
    assert exact_resume(280, 300, None) == 280
    assert cut_rows([(0, 100), (120, 300)], 150) == [(0, 100), (120, 150)]


@pytest.fixture(scope="module")
def model() -> Model:
    return Model(embedded_model_path())


def conversation(question: str, background: str) -> list[dict]:
    return [
        {"role": "system", "content": background},
        {"role": "user", "content": question},
    ]


@pytest.mark.parametrize("notes", [25, 80], ids=["one-chunk", "two-chunks"])
def test_conversations_sharing_a_prefix_answer_as_cold_over_f16(model, notes):
    background = "Background: " + " ".join(
        f"note {i} on the migration of arctic terns." for i in range(1, notes)
    )
    questions = [
        "What is note 3 about?",
        "Which note comes after note 7?",
        "How many notes are there?",
        "What is note 5 about?",
    ]

    def ask(chat: ChatModel, q: str, **kw):
        req = ChatRequest(conversation(q, background), sampling=GREEDY, max_tokens=32, **kw)
        return chat.start(req).collect()[0].done

    cold = {}
    for q in questions:
        with Engine(model, EngineConfig(n_parallel=1, n_ctx=2048, cache_ram_mib=0)) as eng:
            cold[q] = ask(ChatModel(eng), q, cache_prompt=False).token_ids
    with Engine(model, EngineConfig(n_parallel=4, n_ctx=8192)) as eng:
        assert eng.kv_type == "f16"
        chat = ChatModel(eng)
        for q in questions + questions[::-1]:
            done = ask(chat, q)
            assert done.token_ids == cold[q], q
        # the shared prefix was reused: all but the last 64 rows at least
        assert done.usage.cached_tokens >= done.usage.prompt_tokens - EXACT_PIECE - 1
