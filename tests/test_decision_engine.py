"""The decision engine on tiny converted GGUFs of every family: answers, readouts checked
against an independent decode, the shared prefix decoded once, concurrency, trunk-only copies
and images through mtmd."""

from __future__ import annotations

import base64
from concurrent.futures import wait
from pathlib import Path

import gguf
import llama_cpp
import numpy as np
import pytest
from audiokit import wav_bytes
from imagekit import png
from llamactl.converters import convert
from synthetic_checkpoints import (
    H2O_NOUL_FLOOR,
    H2O_SYSTEM,
    H2O_TEMPERATURE,
    cached,
    read_gguf,
    read_tensor,
)

from llamactl.core.errors import ContextLengthError, ModelLoadError
from llamactl.engine.batch import Batch
from llamactl.engine.decision import (
    DecisionConfig,
    DecisionEngine,
    DecisionNotSupportedError,
    find_mmproj,
    load_decision_model,
)
from llamactl.engine.decision.answer import softmax
from llamactl.engine.decision.trunk import trunk_dir
from llamactl.engine.model import Model

pytestmark = pytest.mark.slow  # every test here loads a model

FAMILIES = (
    "openjev",
    "lev",
    "kev",
    "openbmb-minicpm-ocr-jev",
    "lfm2-d1",
    "lfm2-d1-omni",
    "h2o-lightning",
)
BODY = {
    "state": {"customer": "Bob", "issue": "charged twice", "tags": ["billing", "angry"]},
    "questions": {
        "route": {
            "type": "choice",
            "instructions": "Which team?",
            "criteria": {"billing": "Money", "shipping": None, "technical": "Bugs"},
        },
        "urgency": {
            "type": "score",
            "instructions": "How urgent?",
            "criteria": ["can wait", "this week", "today", "right now"],
        },
        "angry": {"type": "noul", "instructions": "Is the customer angry?"},
    },
}
OCR_BODY = {
    "state": "Total: 42.00",
    "questions": {
        "match": {"type": "noul", "instructions": "Does the text match?"},
        "label": {"type": "choice", "instructions": "-", "criteria": {"match": 0, "mismatch": 0}},
        "level": {"type": "score", "instructions": "-", "criteria": ["no", "yes"]},
    },
}


def png_url(seed: int = 0) -> str:
    return "data:image/png;base64," + base64.b64encode(png(48, 40, seed)).decode()


@pytest.fixture(scope="module")
def cache_home(tmp_path_factory):
    """Trunk copies go to a temporary cache for the whole module (module fixtures run before
    the per-test isolation)."""
    home = tmp_path_factory.mktemp("decision_cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(home))
        yield home


@pytest.fixture(scope="module")
def ggufs(tmp_path_factory):
    """Every family converted once (openjev and d1 with their mmproj beside them)."""
    out = tmp_path_factory.mktemp("decision_ggufs")
    paths = {}
    for name in FAMILIES:
        src = cached(tmp_path_factory, name)
        kw = {"base": cached(tmp_path_factory, "qwen35-base")} if name in ("lev", "kev") else {}
        paths[name] = convert(src, out / f"{name}.gguf", **kw).outfile
        if name in ("openjev", "lfm2-d1"):
            convert(src, out / f"{name}.gguf", mmproj=True)
    return paths


def open_engine(path: Path, *, mmproj: bool = True, **config) -> DecisionEngine:
    dm = load_decision_model(path, mmproj=find_mmproj(path) if mmproj else None, progress=False)
    # one thread: on 2 shared cores, 2 threads stall whenever another process holds one
    config = {"n_parallel": 4, "n_ctx": 4 * 1024, "n_threads": 1} | config
    return DecisionEngine(dm, DecisionConfig(**config))


@pytest.fixture(scope="module")
def engines(ggufs, cache_home):
    opened = {name: open_engine(path) for name, path in ggufs.items()}
    yield opened
    for engine in opened.values():
        engine.close()
        engine.dm.close()


def answer(engine: DecisionEngine, body: dict):
    return engine.decide(engine.parse(body), timeout=60)


def as_json(result) -> dict:
    return {qid: a.as_dict() for qid, a in result.answers.items()}


# ------------------------------------------------------------------------ every family
@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_answers(engines, family):
    engine = engines[family]
    body = OCR_BODY if family == "openbmb-minicpm-ocr-jev" else BODY
    result = answer(engine, body)
    got = as_json(result)
    assert list(got) == list(body["questions"])
    for qid, a in got.items():
        question = body["questions"][qid]
        assert a["type"] == question["type"]
        if a["type"] == "noul":
            assert list(a) == ["type", "noul"] and 0.0 <= a["noul"] <= 1.0
            continue
        probs = a["probabilities"]
        keys = question["criteria"]
        assert list(probs) == (
            list(keys) if a["type"] == "choice" else list(map(str, range(len(keys))))
        )
        assert sum(probs.values()) == pytest.approx(1.0, abs=1e-6)
        assert 0.0 <= a["confidence"] <= 1.0
        if a["type"] == "choice":
            assert a["choice"] == max(probs, key=probs.get)
        else:
            assert a["score"] == pytest.approx(sum(int(k) * p for k, p in probs.items()))
    tasks = tasks_of(engine, body)
    assert len(tasks) == len(body["questions"]) + (family == "lev")  # lev asks a choice twice
    assert result.input_tokens == sum(t.n_tokens for t in tasks) > 0


def reference_rows(path: Path, tokens: list[int], *, hidden: bool, causal: bool = True):
    """Decode `tokens` alone in a fresh context: every row's logits or hidden state."""
    model = Model(path)
    params = llama_cpp.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_ubatch, params.n_seq_max = 1024, 512, 512, 1
    params.n_threads = params.n_threads_batch = 1
    params.embeddings = hidden
    ctx = llama_cpp.llama_init_from_model(model.handle, params)
    llama_cpp.llama_set_causal_attn(ctx, causal)
    batch = Batch(512)
    for i, t in enumerate(tokens):
        batch.add(t, i, 0, True)
    assert llama_cpp.llama_decode(ctx, batch.raw) == 0
    width = model.info.n_embd if hidden else model.n_vocab
    get = llama_cpp.llama_get_embeddings_ith if hidden else llama_cpp.llama_get_logits_ith
    rows = np.stack(
        [np.ctypeslib.as_array(get(ctx, i), shape=(width,)) for i in range(len(tokens))]
    )
    rows = rows.copy()
    batch.free()
    llama_cpp.llama_free(ctx)
    model.close()
    return rows


def tasks_of(engine: DecisionEngine, body: dict):
    return engine.dm.builder.build(engine.parse(body), None)


def test_label_readout_matches_an_independent_decode(engines, ggufs):
    engine = engines["openjev"]
    got = as_json(answer(engine, BODY))
    task = tasks_of(engine, BODY)[0]  # "route"
    logits = reference_rows(ggufs["openjev"], task.units, hidden=False)[-1]
    scores = [logits[g[0]] for g in task.labels.groups]
    temp = engine.dm.temperatures["choice"]
    expected = softmax(scores, temp)
    np.testing.assert_allclose(list(got["route"]["probabilities"].values()), expected, atol=1e-5)


def test_h2o_lightning_prompt_temperature_and_noul_floor(engines, ggufs):
    """The shim's layout (system, plain record/question/options, compact JSON, "Answer:"
    after a closed think block), one temperature, and a noul less sure than the floor moved
    to the floor on its own side."""
    engine = engines["h2o-lightning"]
    body = {
        "state": {"ticket": "charged twice", "plan": "pro"},
        "questions": {
            "route": {
                "type": "choice",
                "instructions": "",
                "criteria": {"billing": "Payments", "shipping": None},
            },
            "angry": {"type": "noul", "instructions": "Angry?", "criteria": {"yes": "shouting"}},
        },
    }
    route, angry = tasks_of(engine, body)
    prompt = engine.dm.model.detokenize(route.units, special=True)
    assert prompt == (
        f"<|im_start|>system\n{H2O_SYSTEM}<|im_end|>\n<|im_start|>user\n"
        'record: {"ticket":"charged twice","plan":"pro"}\nquestion: Answer the question below.\n'
        "options:\nA) billing: Payments\nB) shipping: shipping<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\nAnswer:"
    )
    assert engine.dm.model.detokenize(angry.units, special=True).endswith(
        "options:\nA) true: shouting\nB) false: it does not<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\nAnswer:"
    )
    assert engine.dm.temperatures == dict.fromkeys(("choice", "score", "noul"), H2O_TEMPERATURE)
    assert engine.dm.noul_floor == pytest.approx(H2O_NOUL_FLOOR)  # a float32 in the GGUF
    got = as_json(answer(engine, body))
    logits = reference_rows(ggufs["h2o-lightning"], angry.units, hidden=False)[-1]
    p_true = softmax([logits[g[0]] for g in angry.labels.groups], H2O_TEMPERATURE)[0]
    assert max(p_true, 1 - p_true) < H2O_NOUL_FLOOR  # random weights: an unsure answer
    expected = H2O_NOUL_FLOOR if p_true >= 0.5 else 1 - H2O_NOUL_FLOOR
    assert got["angry"]["noul"] == pytest.approx(expected)
    # a choice is not floored
    logits = reference_rows(ggufs["h2o-lightning"], route.units, hidden=False)[-1]
    expected = softmax([logits[g[0]] for g in route.labels.groups], H2O_TEMPERATURE)
    np.testing.assert_allclose(list(got["route"]["probabilities"].values()), expected, atol=1e-5)


def test_pointer_head_matches_an_independent_decode(engines, ggufs):
    engine = engines["kev"]
    got = as_json(answer(engine, BODY))
    task = tasks_of(engine, BODY)[0]
    hidden = reference_rows(engine.dm.trunk.path, task.units, hidden=True)
    w = read_tensor(ggufs["kev"], "cls.output.weight")
    b = read_tensor(ggufs["kev"], "cls.output.bias")
    half = w.shape[0] // 2
    q = w[:half] @ hidden[-1] + b[:half]
    k = hidden[list(task.markers)] @ w[half:].T + b[half:]
    expected = softmax(k @ q / np.sqrt(half), engine.dm.temperatures["choice"])
    np.testing.assert_allclose(list(got["route"]["probabilities"].values()), expected, atol=1e-4)
    meta, _ = read_gguf(engine.dm.trunk.path)
    assert "qwen35.embedding_length_out" not in meta  # it would garble the hidden rows


def test_classifier_head_matches_an_independent_decode(engines, ggufs):
    engine = engines["openbmb-minicpm-ocr-jev"]
    got = as_json(answer(engine, OCR_BODY))
    task = tasks_of(engine, OCR_BODY)[0]
    hidden = reference_rows(engine.dm.trunk.path, task.units, hidden=True)[-1]
    z = read_tensor(ggufs["openbmb-minicpm-ocr-jev"], "cls.output.weight") @ hidden
    assert engine.dm.class_labels == ("mismatch", "match")
    assert got["match"]["noul"] == pytest.approx(softmax(z)[1], abs=1e-4)
    assert got["level"]["probabilities"]["1"] == pytest.approx(softmax(z)[1], abs=1e-4)


def test_omni_reads_every_row_of_a_bidirectional_trunk(engines):
    engine = engines["lfm2-d1-omni"]
    task = tasks_of(engine, BODY)[0]
    assert len(task.outputs) == len(task.units) and len(task.markers) == 3
    hidden = reference_rows(engine.dm.trunk.path, task.units, hidden=True, causal=False)
    got = answer(engine, BODY).answers["route"].probabilities
    scores = engine.dm.head.scores(hidden, task.markers, 0)
    expected = softmax(scores, engine.dm.temperatures.get("choice.3_5", 1.0))
    np.testing.assert_allclose(list(got.values()), expected, atol=1e-4)


# ------------------------------------------------------------------------ sharing
def test_a_shared_prefix_is_decoded_once(ggufs, cache_home):
    shared, alone = open_engine(ggufs["openjev"]), open_engine(ggufs["openjev"], share_prefix=False)
    try:
        with_sharing, without = answer(shared, BODY), answer(alone, BODY)
        assert with_sharing.input_tokens == without.input_tokens
        assert with_sharing.cached_tokens > 0 and without.cached_tokens == 0
        stats = shared.stats
        assert (
            stats.prompt_tokens_processed + stats.prompt_tokens_cached == with_sharing.input_tokens
        )
        assert stats.prompt_tokens_cached == with_sharing.cached_tokens
        assert alone.stats.prompt_tokens_processed == without.input_tokens
        for qid, a in as_json(with_sharing).items():
            b = as_json(without)[qid]  # a prefix decoded apart rounds a little differently
            for key in ("noul", "score", "confidence"):
                if key in a:
                    assert a[key] == pytest.approx(b[key], abs=1e-3)
    finally:
        for engine in (shared, alone):
            engine.close()
            engine.dm.close()


def test_concurrent_requests_answer_as_they_do_alone(engines):
    engine = engines["lfm2-d1"]
    items = list(BODY["questions"].items())
    bodies = [
        {"state": f"ticket {i}: {'x' * i}", "questions": dict(items[: 1 + i % 3])} for i in range(6)
    ]
    solo = [as_json(answer(engine, b)) for b in bodies]
    futures = [engine.submit(engine.parse(b)) for b in bodies]
    wait(futures, timeout=60)
    together = [as_json(f.result()) for f in futures]
    for a, b in zip(solo, together, strict=True):
        assert a.keys() == b.keys()
        for qid in a:
            for key in ("noul", "score", "probabilities"):
                if key in a[qid]:
                    assert a[qid][key] == pytest.approx(b[qid][key], abs=1e-5)


def test_more_questions_than_slots_run_in_blocks(engines):
    engine = engines["openjev"]
    questions = {f"q{i}": {"type": "noul", "instructions": f"Is it {i}?"} for i in range(6)}
    result = answer(engine, {"state": "s", "questions": questions})
    assert list(result.answers) == list(questions)
    assert result.cached_tokens > 0  # blocks of 4 then 2 each share their prefix


# ------------------------------------------------------------------------ trunk copies
def test_the_trunk_only_copy_is_made_once(ggufs, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = load_decision_model(ggufs["kev"], progress=False)
    first.close()
    again = load_decision_model(ggufs["kev"], progress=False)
    again.close()
    assert first.trunk.made and not again.trunk.made and first.trunk.path == again.trunk.path
    assert first.trunk.path.parent == trunk_dir() == tmp_path / "llamactl" / "trunks"
    assert "made a trunk-only copy" in first.notes[0] and "MiB" in first.notes[0]
    assert "reused" in again.notes[0]
    assert set(first.trunk.dropped) == {"cls.output.weight", "cls.output.bias"}
    _, tensors = read_gguf(first.trunk.path)
    assert not any(n.startswith("cls.") for n in tensors)
    assert first.trunk.nbytes == first.trunk.path.stat().st_size
    assert not list(tmp_path.glob("llamactl/trunks/.*partial"))


# ------------------------------------------------------------------------ media
def test_images_go_through_mtmd_and_are_shared(engines):
    engine = engines["openjev"]
    text_only = answer(engine, BODY)
    with_image = answer(engine, {**BODY, "images": [png_url()]})
    assert with_image.input_tokens > text_only.input_tokens
    assert with_image.cached_tokens > text_only.cached_tokens  # the image sits in the prefix
    part = {"type": "image_url", "image_url": {"url": png_url()}}
    in_state = answer(engine, {**BODY, "state": [{"role": "user", "content": [part]}]})
    bare = answer(engine, {**BODY, "state": [{"role": "user", "content": []}]})
    assert (
        in_state.input_tokens - bare.input_tokens
        == with_image.input_tokens - text_only.input_tokens
    )


def test_media_the_model_cannot_take_is_not_supported(engines, ggufs, cache_home):
    with pytest.raises(DecisionNotSupportedError, match="does not take images"):
        engines["kev"].parse({**BODY, "images": [png_url()]})
    bare = open_engine(ggufs["lfm2-d1"], mmproj=False)
    try:
        with pytest.raises(DecisionNotSupportedError, match="mmproj"):
            bare.parse({**BODY, "images": [png_url()]})
        assert answer(engines["lfm2-d1"], {**BODY, "images": [png_url()]}).input_tokens > 0
    finally:
        bare.close()
        bare.dm.close()


def write_mmproj(path: Path, projector_type: str) -> Path:
    writer = gguf.GGUFWriter(path, "clip")
    writer.add_type(gguf.GGUFType.MMPROJ)
    writer.add_bool("clip.has_vision_encoder", True)
    writer.add_string("clip.projector_type", projector_type)
    writer.add_tensor("v.patch_embd.weight", np.zeros((4, 3, 2, 2), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_d1_omni_towers_do_not_run_in_the_pinned_mtmd(engines, ggufs, tmp_path):
    """Verified against the pinned libmtmd: it answers "unknown projector type: d1omni_v"
    (and _a). The model serves text; its media and its towers are refused by name."""
    engine = engines["lfm2-d1-omni"]
    wav = "data:audio/wav;base64," + base64.b64encode(wav_bytes(np.zeros(1600), 16000)).decode()
    for media in ({"images": [png_url()]}, {"images": [wav]}):
        with pytest.raises(DecisionNotSupportedError, match="d1omni_v / d1omni_a"):
            engine.parse({**BODY, **media})
    for kind in ("d1omni_v", "d1omni_a"):
        mmproj = write_mmproj(tmp_path / f"mmproj-{kind}.gguf", kind)
        with pytest.raises(ModelLoadError, match=f"projector type {kind}.*cannot run"):
            load_decision_model(ggufs["lfm2-d1-omni"], mmproj=mmproj, progress=False)
    # any other projector mtmd does not know: its failure names the type
    mmproj = write_mmproj(tmp_path / "mmproj-other.gguf", "nosuch_v")
    why = r"projector type nosuch_v\): .*unknown projector type: nosuch_v"  # llama.cpp's words
    with pytest.raises(ModelLoadError, match=why):
        load_decision_model(ggufs["openjev"], mmproj=mmproj, progress=False)


def test_a_prompt_longer_than_a_slot_fails_the_request(ggufs, cache_home):
    engine = open_engine(ggufs["openjev"], n_parallel=2, n_ctx=2 * 512)
    try:
        with pytest.raises(ContextLengthError):
            answer(engine, {**BODY, "state": "word " * 600})
        assert answer(engine, BODY).input_tokens > 0  # the engine goes on
    finally:
        engine.close()
        engine.dm.close()


def test_markers_inside_a_shared_prefix_reach_every_task(engines, ggufs, cache_home):
    same_start = {
        "state": "order 1182 arrived broken",
        "questions": {
            qid: {
                "type": "choice",
                "instructions": "What next?",
                "criteria": {"refund": None, b: None},
            }
            for qid, b in (("a", "resend"), ("b", "repair"), ("c", "ignore"))
        },
    }
    tasks = tasks_of(engines["kev"], same_start)
    first, second = tasks[0].units, tasks[1].units
    prefix = next(i for i, (x, y) in enumerate(zip(first, second, strict=False)) if x != y)
    assert tasks[0].markers[0] < prefix  # the first option's marker is shared
    alone = open_engine(ggufs["kev"], share_prefix=False)
    try:
        shared, whole = answer(engines["kev"], same_start), answer(alone, same_start)
        assert shared.cached_tokens > 0
        for qid in same_start["questions"]:
            a, b = shared.answers[qid].probabilities, whole.answers[qid].probabilities
            assert a == pytest.approx(b, abs=1e-3)
    finally:
        alone.close()
        alone.dm.close()
