"""Urgent first tokens on the real engine (SmolLM2, and Gemma 3's sliding window): a request
with `urgent_tokens` (a voice answer's first clause) decodes those tokens while the other
sequences sit out, and nobody's output changes: each equals its output alone (greedy)."""

from __future__ import annotations

import threading
import time

import pytest
from model_matrix import gemma_path

from llamactl.engine.engine import Engine, EngineConfig, GenerationRequest
from llamactl.engine.model import Model
from llamactl.engine.types import SamplingParams, TextDelta
from llamactl.models import embedded_model_path

MODEL_FIXTURES = {"family"}
GREEDY = SamplingParams(temperature=0.0)


TURNS = {  # each family's chat turn, so the model answers instead of ending at once
    "dense": "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n",
    "swa": "<start_of_turn>user\n{}<end_of_turn>\n<start_of_turn>model\n",
}


@pytest.fixture(scope="module", params=["dense", "swa"])
def family(request) -> tuple[Model, str]:
    path = embedded_model_path() if request.param == "dense" else gemma_path()
    return Model(path), TURNS[request.param]


def test_an_urgent_answer_goes_first_and_changes_nobody_s_output(family) -> None:
    model, turn = family
    story = turn.format("Write a long story about a lighthouse keeper.")
    question = turn.format("What is the capital of France?")
    config = EngineConfig(n_parallel=4, n_threads=2, cache_ram_mib=0)
    with Engine(model, config) as engine:

        def request(text: str, n: int, **kw) -> GenerationRequest:
            return GenerationRequest(
                model.tokenize(text), GREEDY, max_tokens=n, cache_prompt=False, **kw
            )

        alone_story = engine.submit(request(story, 96)).collect()[0][0]
        alone_answer = engine.submit(request(question, 24)).collect()[0][0]

        counts = [0, 0, 0]
        seen_at_urgent: list[int] = []
        stories = [engine.submit(request(story, 96)) for _ in range(3)]
        texts = ["", "", ""]

        def read(i: int) -> None:
            for ev in stories[i]:
                if isinstance(ev, TextDelta):
                    texts[i] += ev.text
                    counts[i] += 1

        readers = [threading.Thread(target=read, args=(i,)) for i in range(3)]
        for t in readers:
            t.start()
        deadline = time.monotonic() + 60
        while sum(counts) < 12:  # the stories are generating
            assert time.monotonic() < deadline, counts
            time.sleep(0.005)
        urgent = engine.submit(request(question, 24, urgent_tokens=6))
        answer = ""
        tokens = 0
        for ev in urgent:
            if isinstance(ev, TextDelta):
                if not tokens:
                    start = sum(counts)
                answer += ev.text
                tokens += max(1, len(ev.token_ids))
                if tokens >= 6 and not seen_at_urgent:
                    seen_at_urgent.append(sum(counts) - start)
        for t in readers:
            t.join()
    assert answer == alone_answer
    assert texts == [alone_story] * 3
    # while its first 6 tokens decoded, the stories made (almost) no progress: at most the
    # tokens already sampled when it arrived
    assert seen_at_urgent and seen_at_urgent[0] <= 6, (seen_at_urgent, tokens, answer)
