"""Decision models as llama.cpp b11434 converts and serves them (issue 18): OpenJev laid out
as upstream publishes it (detection, the helper's temperatures, its prompt), a Qwen3.5 layer
pattern that is not periodic, kev's flattened state, lev's label codes and empty
instructions. Every test runs the real engine on a tiny converted GGUF."""

from __future__ import annotations

import numpy as np
import pytest
from llamactl.converters import convert
from synthetic_checkpoints import build, cached, read_gguf
from test_decision_engine import (
    BODY,
    answer,
    as_json,
    cache_home,  # noqa: F401  (a fixture the engines need)
    open_engine,
    reference_rows,
    tasks_of,
)

from llamactl.engine.chat.environment import compile_template
from llamactl.engine.decision.answer import softmax

pytestmark = pytest.mark.slow  # every test here loads a model

# what OpenJev's helper applies, as llama.cpp's converter writes it (float32 in the file)
HELPER_TEMPERATURES = {"choice": 0.85, "score": 0.85, "noul": 0.85 * 1.829074}
SNAPSHOT = "models--someone--decider/snapshots/5d41402abc4b2a76b9719d911017c592"


def temperatures(meta: dict) -> dict[str, float]:
    return {k.split("temperature.")[1]: v for k, v in meta.items() if ".temperature." in k}


def prompt_of(engine, task) -> str:
    return engine.dm.model.detokenize(task.units, special=True)


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    """OpenJev as published (helper/shim.py, no calibration.json), in a directory named as
    a Hugging Face cache names a snapshot: nothing says "openjev"."""
    root = tmp_path_factory.mktemp("hub")
    src = build("openjev-upstream", root / SNAPSHOT)
    out = tmp_path_factory.mktemp("upstream_gguf") / "decider.gguf"
    convert(src, out, mmproj=True)
    return convert(src, out).outfile


@pytest.fixture(scope="module")
def upstream_engine(upstream, cache_home):  # noqa: F811
    engine = open_engine(upstream)
    yield engine
    engine.close()
    engine.dm.close()


def _adapter_engine(tmp_path_factory, family: str):
    """A lev/kev adapter converted over the tiny Qwen3.5 base, served by the real engine."""
    out = tmp_path_factory.mktemp(f"{family}_gguf") / f"{family}.gguf"
    base = cached(tmp_path_factory, "qwen35-base")
    path = convert(cached(tmp_path_factory, family), out, base=base).outfile
    engine = open_engine(path)
    yield engine
    engine.close()
    engine.dm.close()


@pytest.fixture(scope="module")
def lev_engine(tmp_path_factory, cache_home):  # noqa: F811
    yield from _adapter_engine(tmp_path_factory, "lev")


@pytest.fixture(scope="module")
def kev_engine(tmp_path_factory, cache_home):  # noqa: F811
    yield from _adapter_engine(tmp_path_factory, "kev")


# ----------------------------------------------------------------------- openjev
def test_upstream_openjev_is_detected_and_served_at_the_helpers_temperatures(
    upstream, upstream_engine
):
    meta, _ = read_gguf(upstream)
    assert meta["qwen35.decision.type"] == "openjev"
    assert temperatures(meta) == pytest.approx(HELPER_TEMPERATURES, rel=1e-6)
    engine = upstream_engine
    assert engine.dm.temperatures == pytest.approx(HELPER_TEMPERATURES, rel=1e-6)
    got = as_json(answer(engine, BODY))
    route, _, angry = tasks_of(engine, BODY)
    logits = reference_rows(upstream, route.units, hidden=False)[-1]
    expected = softmax([logits[g[0]] for g in route.labels.groups], 0.85)
    np.testing.assert_allclose(list(got["route"]["probabilities"].values()), expected, atol=1e-5)
    logits = reference_rows(upstream, angry.units, hidden=False)[-1]
    p_true = softmax([logits[g[0]] for g in angry.labels.groups], 0.85 * 1.829074)[0]
    assert got["angry"]["noul"] == pytest.approx(p_true, abs=1e-5)


def test_openjev_prompt_is_the_helpers_layout(upstream_engine):
    """`[B] shipping: ` for an option without a description, the helper's yes/no meanings for
    a bare noul; the score's levels lettered the same way."""
    engine = upstream_engine
    route, urgency, angry = (prompt_of(engine, t) for t in tasks_of(engine, BODY))
    head = "<|im_start|>user\nState:\n"
    tail = (
        "\nAnswer with the letter of the best option only.<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )
    assert route.startswith(head) and route.endswith(tail)
    assert route.endswith(
        "Question: Which team?\nOptions:\n[A] billing: Money\n[B] shipping: \n"
        "[C] technical: Bugs\n" + tail
    )
    assert urgency.endswith(
        "Question: How urgent? Rate along the ordered levels below (lowest first).\nOptions:\n"
        "[A] 0: can wait\n[B] 1: this week\n[C] 2: today\n[D] 3: right now\n" + tail
    )
    assert angry.endswith(
        "Question: Is the customer angry?\nOptions:\n[A] yes: The statement is true.\n"
        "[B] no: The statement is false.\n" + tail
    )


def test_openjev_template_letters_options_without_labels(upstream):
    """llama-server passes no `label` for openjev: the letters come from the template."""
    meta, _ = read_gguf(upstream)
    template = compile_template(meta["tokenizer.chat_template.systemone"])
    text = template.render(
        id="route",
        type="choice",
        instructions="Which team?",
        state="s",
        options=[{"key": "billing", "description": None}, {"key": "tech", "description": "x"}],
        images=[],
    )
    assert "Options:\n[A] billing: \n[B] tech: x\n" in text


def test_openjev_images_get_the_screenshot_line(upstream_engine):
    engine = upstream_engine
    request = engine.parse({**BODY, "state": "on screen: <__media__> pay"})
    q = request.questions[0]
    labels = engine.dm.builder.labels.for_options(q.type, q.options)
    text = engine.dm.builder.renderer.render(q, q.options, labels, request.state, 1)
    assert text.startswith(
        "<|im_start|>user\n<__media__>The screenshot shows the current screen.\n"
        "State:\non screen:   pay\n\n"  # a marker in user text is a blank, as llama-server
    )
    alone = engine.dm.builder.renderer.render(q, q.options, labels, request.state, 0)
    assert "screenshot" not in alone and "on screen: <__media__> pay" in alone


# ------------------------------------------------------------- qwen35 layer types
def test_a_layer_pattern_that_is_not_periodic_loads_and_answers(tmp_path, cache_home):  # noqa: F811
    src = build(
        "openjev-upstream",
        tmp_path / "src",
        layer_types=("full_attention", "linear_attention", "linear_attention"),
    )
    out = convert(src, tmp_path / "model.gguf").outfile
    meta, tensors = read_gguf(out)
    assert meta["qwen35.attention.recurrent_layers"] == [False, True, True]
    assert "blk.0.attn_q.weight" in tensors and "blk.1.ssm_a" in tensors
    engine = open_engine(out, mmproj=False)
    try:
        got = as_json(answer(engine, BODY))
    finally:
        engine.close()
        engine.dm.close()
    assert sum(got["route"]["probabilities"].values()) == pytest.approx(1.0, abs=1e-6)


# ---------------------------------------------------------------------------- kev
def test_kev_flattens_the_state_as_llama_server(kev_engine):
    body = {
        "state": {"name": "Bob", "notes": None, "orders": [1, {"id": 2, "sku": "X"}, [3]]},
        "questions": {"q": {"type": "noul", "instructions": {"ask": "late?", "hint": None}}},
    }
    (task,) = tasks_of(kev_engine, body)
    assert prompt_of(kev_engine, task).startswith(
        "<|fim_prefix|>name: Bob\nnotes: \norders:\n  - 1\n  - id: 2\n    sku: X\n  - - 3"
        "<|fim_middle|>ask: late?\nhint: <|box_start|>"
    )
    assert list(as_json(answer(kev_engine, body))["q"]) == ["type", "noul"]


# ---------------------------------------------------------------------------- lev
def test_lev_skips_label_codes_that_are_not_one_token(lev_engine):
    """The tiny vocabulary has A..Z, `NO` and `YE` as single tokens, no other two-letter
    code: llama-server labels the 27th option `NO`, the 28th `YE`, and so does llamactl."""
    assert lev_engine.max_options == 28
    criteria = {f"k{i}": None for i in range(28)}
    body = {"state": "s", "questions": {"q": {"type": "choice", "instructions": "Which?",
                                              "criteria": criteria}}}  # fmt: skip
    first, _ = tasks_of(lev_engine, body)
    assert "\nZ. k25\nNO. k26\nYE. k27\n" in prompt_of(lev_engine, first)
    probs = as_json(answer(lev_engine, body))["q"]["probabilities"]
    assert list(probs) == list(criteria) and sum(probs.values()) == pytest.approx(1.0, abs=1e-6)
    too_many = {"q": {"type": "choice", "instructions": "i", "criteria": {**criteria, "x": 0}}}
    with pytest.raises(Exception, match="too many options \\(29\\)"):
        lev_engine.parse({"state": "s", "questions": too_many})


def test_lev_answers_empty_instructions_with_the_question_id(lev_engine):
    body = {"state": "s", "questions": {"late": {"type": "noul", "instructions": ""}}}
    (task,) = tasks_of(lev_engine, body)
    assert "# Criterion\nlate\n\n# Scale\n" in prompt_of(lev_engine, task)
    assert 0.0 <= as_json(answer(lev_engine, body))["late"]["noul"] <= 1.0
