"""llama-server's --cache-reuse on the real engine: a prompt that leaves out a middle chunk of
the slot's cached prompt gets the chunk after it shifted into place (more cached tokens) and
still answers sensibly; with it off (the default) nothing changes."""

from __future__ import annotations

import pytest

from llamactl.engine.engine import Engine, EngineConfig, GenerationRequest
from llamactl.engine.model import Model
from llamactl.engine.types import SamplingParams
from llamactl.models import embedded_model_path

MODEL_FIXTURES = {"model"}
GREEDY = SamplingParams(temperature=0.0)
HEAD = "Here is a short story about a lighthouse keeper who lived alone on a rocky island."
MIDDLE = " Every night he climbed the stairs, wound the clock and lit the great lamp."
TAIL = (
    " One winter a ship lost its way in the fog, and the keeper rang the bell until dawn"
    " so that the sailors could find the harbour. All night long the keeper rang the"
)


@pytest.fixture(scope="module")
def model() -> Model:
    return Model(embedded_model_path())


def run(engine: Engine, text: str, **kw):
    prompt = engine.model.tokenize(text)
    stream = engine.submit(GenerationRequest(prompt, GREEDY, max_tokens=16, slot=0, **kw))
    texts, _ = stream.collect()
    return texts[0], stream.cached_tokens


def warm_then_shorter(engine: Engine, **kw):
    run(engine, HEAD + MIDDLE + TAIL)
    return run(engine, HEAD + TAIL, **kw)


def test_a_removed_middle_chunk_reuses_the_rest(model) -> None:
    config = EngineConfig(n_parallel=1, n_threads=2, cache_ram_mib=0)
    with Engine(model, config) as plain:
        cold_text, _ = run(plain, HEAD + TAIL, cache_prompt=False)
        off_text, off_cached = warm_then_shorter(plain)
    with Engine(
        model, EngineConfig(n_parallel=1, n_threads=2, cache_ram_mib=0, cache_reuse=8)
    ) as on:
        on_text, on_cached = warm_then_shorter(on)
        run(on, HEAD + MIDDLE + TAIL)
        shifted = on.stats.cache_reuse_shifted
        # the per-request field turns it off again: the prefix alone, nothing moved
        _, off2_cached = run(on, HEAD + TAIL, n_cache_reuse=0)
        assert on.stats.cache_reuse_shifted == shifted
    tail_tokens = len(model.tokenize(TAIL, add_special=False))
    assert off_text == cold_text  # off: exact, the prefix alone is reused
    assert on_cached >= off_cached + tail_tokens - 4
    assert "bell" in cold_text.lower() and "bell" in on_text.lower()  # inexact, but sensible
    assert off2_cached <= len(model.tokenize(HEAD))  # the shared prefix at most, nothing moved
