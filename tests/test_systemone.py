"""`POST /v1/systemone` end to end on a live server with tiny converted decision models: every
check of llama.cpp's test_systemone.py, plus `/v1/decisions`, refusals on the chat routes,
`/v1/models` and concurrency."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from llamactl.converters import convert
from serverkit import run_server
from synthetic_checkpoints import cached
from test_decision_engine import png_url

MODEL_FIXTURES = {"kev", "live", "one_slot"}  # fixtures that load a model: users are slow

REQUEST = {
    "state": {"ticket": "I was charged twice for my order", "customer": {"plan": "pro"}},
    "questions": {
        "route": {
            "type": "choice",
            "instructions": "Which team should handle the ticket?",
            "criteria": {"billing": "Payments and refunds", "shipping": None, "technical": "Bugs"},
        },
        "urgency": {
            "type": "score",
            "instructions": "How urgent is it?",
            "criteria": ["can wait", "this week", "today", "right now"],
        },
        "angry": {"type": "noul", "instructions": "Is the customer angry?"},
    },
}
NOT_A_DECISION_MODEL = {
    "error": {
        "code": 501,
        "message": "This model is not a decision model",
        "type": "not_supported_error",
    }
}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """openjev with its mmproj beside it, and kev (a trunk-only copy plus a numpy head)."""
    out = tmp_path_factory.mktemp("systemone_models")
    openjev = cached(tmp_path_factory, "openjev")
    convert(openjev, out / "openjev.gguf")
    convert(openjev, out / "openjev.gguf", mmproj=True)
    base = cached(tmp_path_factory, "qwen35-base")
    convert(cached(tmp_path_factory, "kev"), out / "kev.gguf", base=base)
    return out


@pytest.fixture(scope="module")
def live(models, tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("systemone_cache")))
        with run_server(model=str(models / "openjev.gguf"), threads=1, metrics=True) as s:
            yield s


@pytest.fixture(scope="module")
def one_slot(models):
    with run_server(model=str(models / "openjev.gguf"), threads=1, parallel=1) as s:
        yield s


@pytest.fixture(scope="module")
def kev(models, tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("systemone_kev_cache")))
        with run_server(model=str(models / "kev.gguf"), threads=1) as s:
            yield s


def post(server, body, path: str = "/v1/systemone") -> httpx.Response:
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return httpx.post(
        server.url + path, content=data, headers={"content-type": "application/json"}, timeout=60
    )


def ok(server, body, path: str = "/v1/systemone") -> dict:
    r = post(server, body, path)
    assert r.status_code == 200, r.text
    return r.json()


def metric(server, name: str) -> float:
    text = httpx.get(server.url + "/metrics", timeout=10).text
    return next(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name))


# ------------------------------------------------------------------------ answers
def test_three_questions_are_answered_in_request_order(live):
    got = ok(live, REQUEST)
    assert list(got) == ["model", "answers", "usage"]
    assert got["model"] == "openjev"
    assert got["usage"]["input_tokens"] > 0 and got["usage"]["output_tokens"] == 0
    answers = got["answers"]
    assert list(answers) == ["route", "urgency", "angry"]

    route = answers["route"]
    assert list(route) == ["type", "choice", "probabilities", "confidence"]
    assert list(route["probabilities"]) == ["billing", "shipping", "technical"]
    assert sum(route["probabilities"].values()) == pytest.approx(1.0, abs=1e-4)
    assert route["choice"] == max(route["probabilities"], key=route["probabilities"].get)
    assert 0.0 <= route["confidence"] <= 1.0

    urgency = answers["urgency"]
    assert urgency["legend"] == {"0": "can wait", "1": "this week", "2": "today", "3": "right now"}
    assert list(urgency["probabilities"]) == ["0", "1", "2", "3"]
    assert sum(urgency["probabilities"].values()) == pytest.approx(1.0, abs=1e-4)
    expected = sum(int(k) * p for k, p in urgency["probabilities"].items())
    assert urgency["score"] == pytest.approx(expected, abs=1e-6)
    assert 0.0 <= urgency["confidence"] <= 1.0

    assert answers["angry"] == {"type": "noul", "noul": answers["angry"]["noul"]}
    assert 0.0 <= answers["angry"]["noul"] <= 1.0


def test_the_request_model_is_ignored(live):
    got = ok(live, {**REQUEST, "model": "jev-latest"})
    assert got["model"] == "openjev"


def test_an_object_state_and_its_json_string_are_the_same_prompt(live):
    state = {"b": 1, "a": ["x", {"y": None}], "z": "ü"}
    question = {"q": {"type": "noul", "instructions": "Is it?"}}
    as_object = ok(live, {"state": state, "questions": question})
    as_string = ok(live, {"state": json.dumps(state, ensure_ascii=False), "questions": question})
    assert as_object["usage"] == as_string["usage"]
    assert as_object["answers"]["q"]["noul"] == pytest.approx(
        as_string["answers"]["q"]["noul"], abs=1e-4
    )


INVALID = [
    ({"questions": REQUEST["questions"]}, '"state" must be provided'),
    ({"state": "s"}, '"questions" must be a non-empty object'),
    ({}, '"questions" must be a non-empty object'),
    (
        {"state": "s", "questions": {"q": {"type": "rank", "instructions": "i"}}},
        'questions.q: "type" must be one of: choice, score, noul',
    ),
    (
        {"state": "s", "questions": {"q": {"type": "noul"}}},
        'questions.q: "instructions" must be provided',
    ),
    (
        {"state": "s", "questions": {"q": {"type": "choice", "instructions": "i"}}},
        'questions.q: "criteria" must be a non-empty object',
    ),
    (
        {"state": "s", "questions": {"q": {"type": "choice", "instructions": "i", "criteria": {}}}},
        'questions.q: "criteria" must be a non-empty object',
    ),
    (
        {"state": "s", "questions": {"q": {"type": "score", "instructions": "i", "criteria": [1]}}},
        'questions.q: "criteria" must be an array of 2 to 10 levels',
    ),
    ("{not json", "Invalid JSON in the request body"),
]  # fmt: skip


@pytest.mark.parametrize(("body", "message"), INVALID)
def test_invalid_bodies_are_400(live, body, message):
    r = post(live, body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"].startswith(message)


# ------------------------------------------------------------------------ shared prompt
def test_the_shared_prompt_is_decoded_once(live, one_slot):
    processed = metric(live, "llamactl:prompt_tokens_total")
    cached_before = metric(live, "llamactl:prompt_tokens_cached_total")
    got = ok(live, REQUEST)
    shared = metric(live, "llamactl:prompt_tokens_cached_total") - cached_before
    decoded = metric(live, "llamactl:prompt_tokens_total") - processed
    assert shared > 0 and shared % 2 == 0  # the prefix, copied to the two other questions
    assert decoded + shared == got["usage"]["input_tokens"]
    alone = ok(one_slot, REQUEST)  # one slot: nothing to share with
    assert alone["usage"] == got["usage"]
    for qid, answer in got["answers"].items():
        other = alone["answers"][qid]
        if "probabilities" in answer:
            for key, p in answer["probabilities"].items():
                assert p == pytest.approx(other["probabilities"][key], abs=0.01)
        else:
            assert answer["noul"] == pytest.approx(other["noul"], abs=0.01)


def test_concurrent_requests_answer_as_they_do_alone(live):
    bodies = [
        {**REQUEST, "state": f"ticket {i}: " + "please help " * i, "model": None} for i in range(5)
    ]
    solo = [ok(live, b)["answers"] for b in bodies]
    with ThreadPoolExecutor(5) as pool:
        together = list(pool.map(lambda b: ok(live, b)["answers"], bodies))
    for a, b in zip(solo, together, strict=True):
        assert a["route"]["probabilities"] == pytest.approx(b["route"]["probabilities"], abs=1e-5)
        assert a["urgency"]["score"] == pytest.approx(b["urgency"]["score"], abs=1e-5)
        assert a["angry"]["noul"] == pytest.approx(b["angry"]["noul"], abs=1e-5)


# ------------------------------------------------------------------------ images
def test_an_image_counts_in_usage(live):
    plain = ok(live, REQUEST)["usage"]["input_tokens"]
    assert ok(live, {**REQUEST, "images": [png_url()]})["usage"]["input_tokens"] > plain
    part = {"type": "image_url", "image_url": {"url": png_url(1)}}
    state = [{"role": "user", "content": [{"type": "text", "text": "my receipt"}, part]}]
    assert ok(live, {**REQUEST, "state": state})["usage"]["input_tokens"] > 0


def test_image_limits(live):
    r = post(live, {**REQUEST, "images": [png_url()] * 9})
    assert (
        r.status_code == 400 and r.json()["error"]["message"] == "too many images, the maximum is 8"
    )
    r = post(live, {**REQUEST, "images": ["https://example.com/cat.png"]})
    assert r.status_code == 400 and "data URLs" in r.json()["error"]["message"]
    r = post(live, {**REQUEST, "images": ["data:image/png;base64,bm90IGFuIGltYWdl"]})
    assert r.status_code == 400 and "could not be decoded" in r.json()["error"]["message"]


def test_images_on_a_model_without_an_image_place_are_501(kev):
    r = post(kev, {**REQUEST, "images": [png_url()]})
    assert r.status_code == 501 and r.json()["error"]["type"] == "not_supported_error"
    got = ok(kev, REQUEST)  # the trunk-only copy and the pointer head, through the server
    assert list(got["answers"]) == ["route", "urgency", "angry"]


# ------------------------------------------------------------------------ other routes
def test_a_chat_model_is_not_a_decision_model(server):
    for body in (REQUEST, b"{not json"):  # checked before the body is read
        r = post(server, body)
        assert r.status_code == 501 and r.json() == NOT_A_DECISION_MODEL
    assert post(server, {"questions": {}}, "/v1/decisions").status_code == 501


def test_a_decision_model_refuses_text_generation(live):
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    for path, body in (
        ("/v1/chat/completions", chat),
        ("/v1/completions", {"prompt": "hi", "max_tokens": 4}),
        ("/v1/messages", {**chat, "model": "openjev"}),
        ("/v1/responses", {"input": "hi"}),
    ):
        r = post(live, body, path)
        assert r.status_code == 501, (path, r.text)
        assert "is a decision model (openjev)" in r.text and "/v1/systemone" in r.text


def test_models_reports_decisions_as_the_output(live):
    entry = httpx.get(live.url + "/v1/models", timeout=10).json()["data"][0]
    # openjev's mmproj (beside it) sees: images count as input
    assert entry["architecture"] == {
        "input_modalities": ["text", "image"],
        "output_modalities": ["decisions"],
    }
    assert entry["capabilities"] == ["decisions", "image_in"]
    assert "capabilities" not in entry["meta"]


def test_openai_style_decisions(live):
    questions = [{"id": qid, **q} for qid, q in REQUEST["questions"].items()]
    got = ok(
        live,
        {"model": "openjev", "input": REQUEST["state"], "questions": questions},
        "/v1/decisions",
    )
    assert got["object"] == "decision" and got["id"].startswith("decision-")
    assert got["model"] == "openjev"
    assert [a["id"] for a in got["answers"]] == ["route", "urgency", "angry"]
    assert [a["index"] for a in got["answers"]] == [0, 1, 2]
    same = ok(live, REQUEST)
    assert got["answers"][0]["probabilities"] == pytest.approx(
        same["answers"]["route"]["probabilities"]
    )
    usage = got["usage"]
    assert usage["input_tokens"] == same["usage"]["input_tokens"] == usage["total_tokens"]
    assert usage["input_tokens_details"]["cached_tokens"] > 0
    r = post(live, {"model": "gpt-4o", "input": "s", "questions": questions}, "/v1/decisions")
    assert r.status_code == 200  # any name is answered by the one model, as llama-server does
    r = post(
        live, {"input": "s", "questions": [{"type": "noul", "instructions": "i"}]}, "/v1/decisions"
    )
    assert r.status_code == 400 and 'questions[0]: "id"' in r.json()["error"]["message"]
