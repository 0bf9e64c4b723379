"""Decision scoring without a model: the answer maths against the spec's published values,
request validation messages, label codes, prompt preparation, and `llamactl score`'s flags."""

from __future__ import annotations

import numpy as np
import pytest

from llamactl.cli.score import parse_question
from llamactl.core.errors import InvalidRequestError, ModelLoadError
from llamactl.engine.chat.environment import compile_template
from llamactl.engine.decision.answer import (
    DecisionEvalError,
    bucket,
    choice_confidence,
    format_answer,
    score_confidence,
    softmax,
    temperature,
)
from llamactl.engine.decision.labels import LabelMaker, d1_pool
from llamactl.engine.decision.registry import TYPES, lookup
from llamactl.engine.decision.render import PromptRenderer, TextPrep, escape_special, flatten
from llamactl.engine.decision.request import parse_request

OPENJEV, LEV, KEV, D1, OMNI = (
    TYPES[n] for n in ("openjev", "lev", "kev", "lfm2-d1", "lfm2-d1-omni")
)
PNG = "data:image/png;base64,iVBORw0KGgo="


# ------------------------------------------------------------------------ answer maths
@pytest.mark.parametrize(
    ("n", "p_max", "published"),
    [(3, 0.61, 0.42), (4, 0.40, 0.20), (5, 0.74, 0.67), (3, 0.84, 0.76)],
)
def test_choice_confidence_matches_the_published_values(n, p_max, published):
    p = np.array([p_max] + [(1 - p_max) / (n - 1)] * (n - 1))
    assert abs(choice_confidence(p) - published) <= 0.01


@pytest.mark.parametrize(
    ("p", "published"),
    [
        ([0.95, 0.05], 0.90),
        ([0, 0.57, 0.43], 0.35),
        ([0, 0.48, 0.52, 0], 0.52),
        ([0, 0, 0.86, 0.14, 0], 0.89),
    ],
)
def test_score_confidence_matches_the_published_values(p, published):
    assert abs(score_confidence(np.array(p)) - published) <= 0.01


def test_confidence_edges():
    assert choice_confidence(np.array([1.0])) == 1.0 and score_confidence(np.array([1.0])) == 1.0
    assert choice_confidence(np.array([0.2, 0.4, 0.4])) == pytest.approx(0.1)
    assert score_confidence(np.array([0.5, 0.0, 0.5])) == 0.0  # never negative


def test_temperatures_by_bucket_then_type_then_one():
    temps = {"choice": 1.2, "choice.11": 1.3, "noul.2": 0.7, "score.small": 2.0}
    assert [bucket(n, "count") for n in (2, 3, 5, 6, 10, 11, 99)] == [
        "2", "3_5", "3_5", "6_10", "6_10", "11", "11"
    ]  # fmt: skip
    assert [bucket(n, "lev") for n in (8, 9, 26, 27)] == ["small", "mid", "mid", "large"]
    assert temperature(temps, "choice", 12, "count") == 1.3
    assert temperature(temps, "choice", 3, "count") == 1.2
    assert temperature(temps, "noul", 2, "count") == 0.7
    assert temperature(temps, "score", 4, "count") == 1.0
    assert temperature(temps, "score", 4, "lev") == 2.0


def test_softmax_with_temperature_and_nan():
    np.testing.assert_allclose(softmax([0.0, np.log(3.0)], 1.0), [0.25, 0.75])
    np.testing.assert_allclose(softmax([0.0, 2 * np.log(3.0)], 2.0), [0.25, 0.75])
    with pytest.raises(DecisionEvalError, match="the model could not evaluate the decision"):
        softmax([0.0, float("nan")])


def _question(body_q, dtype=OPENJEV):
    return parse_request({"state": "s", "questions": {"q": body_q}}, dtype, 52).questions[0]


def test_format_answer_choice_score_noul():
    q = _question({"type": "choice", "instructions": "i", "criteria": {"b": None, "a": "x"}})
    tie = format_answer(q, OPENJEV, [np.array([1.0, 1.0])], 1.0)
    assert tie.choice == "b" and list(tie.probabilities) == ["b", "a"]  # first of equal maxima
    assert tie.as_dict() == {
        "type": "choice",
        "choice": "b",
        "probabilities": {"b": 0.5, "a": 0.5},
        "confidence": 0.0,
    }
    s = _question({"type": "score", "instructions": "i", "criteria": ["lo", {"x": 1}, "hi"]})
    a = format_answer(s, OPENJEV, [np.log(np.array([0.2, 0.3, 0.5]))], 1.0).as_dict()
    assert list(a) == ["type", "score", "legend", "probabilities", "confidence"]
    assert a["score"] == pytest.approx(0.3 + 2 * 0.5)
    assert a["legend"] == {"0": "lo", "1": {"x": 1}, "2": "hi"}
    n = _question({"type": "noul", "instructions": "i"})  # openjev: true first
    assert [o.key for o in n.options] == ["true", "false"]
    assert format_answer(n, OPENJEV, [np.log([0.8, 0.2])], 1.0).as_dict() == {
        "type": "noul",
        "noul": pytest.approx(0.8),
    }


def test_lev_averages_its_variants_and_rates_noul_on_nine_labels():
    q = _question({"type": "choice", "instructions": "i", "criteria": {"a": 0, "b": 0}}, LEV)
    a = format_answer(q, LEV, [np.log([0.9, 0.1]), np.log([0.5, 0.5])], 1.0)
    assert a.probabilities == {"a": pytest.approx(0.7), "b": pytest.approx(0.3)}
    n = _question({"type": "noul", "instructions": "i"}, LEV)
    assert [o.key for o in n.options] == ["false", "true"]
    rating = np.full(9, -50.0)
    rating[6] = 0.0
    assert format_answer(n, LEV, [rating], 1.0).noul == pytest.approx(6 / 8)


# ------------------------------------------------------------------------ validation
NOUL = {"q": {"type": "noul", "instructions": "i"}}


def one(question: dict) -> dict:
    return {"state": "s", "questions": {"q": question}}


BAD_BODIES = [
    ({"questions": {"q": {"type": "noul", "instructions": "i"}}}, '"state" must be provided'),
    ({"state": "s"}, '"questions" must be a non-empty object'),
    ({}, '"questions" must be a non-empty object'),
    ({"state": "s", "questions": {}}, '"questions" must be a non-empty object'),
    ({"state": "s", "questions": []}, '"questions" must be a non-empty object'),
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
        one({"type": "score", "instructions": "i", "criteria": ["a"]}),
        'questions.q: "criteria" must be an array of 2 to 10 levels',
    ),
    (
        one({"type": "score", "instructions": "i", "criteria": list("abcdefghijk")}),
        'questions.q: "criteria" must be an array of 2 to 10 levels',
    ),
    (
        {"state": "s", "questions": {"q": {"type": "noul", "instructions": "i", "criteria": "x"}}},
        'questions.q: "criteria" must be an object',
    ),
    (
        one({"type": "choice", "instructions": "i", "criteria": {str(i): 0 for i in range(53)}}),
        "questions.q: too many options (53), this model supports at most 52",
    ),
    (
        {"state": "s", "questions": NOUL, "images": [PNG] * 9},
        "too many images, the maximum is 8",
    ),
    (
        {"state": "s", "questions": NOUL, "images": ["https://x/y.png"]},
        "images must be data URLs",
    ),
    (
        {"state": "s", "questions": NOUL, "videos": ["v"]},
        '"videos" is not supported',
    ),
    ("not an object", "the request body must be a JSON object"),
]  # fmt: skip


@pytest.mark.parametrize(("body", "message"), BAD_BODIES)
def test_invalid_requests_are_refused_with_the_spec_messages(body, message):
    with pytest.raises(InvalidRequestError) as info:
        parse_request(body, OPENJEV, 52)
    assert str(info.value).startswith(message)


def test_null_state_only_for_d1_types_and_empty_instructions_are_a_question():
    q = {"q": {"type": "noul", "instructions": "i"}}
    for dtype in (D1, OMNI):
        assert parse_request({"state": None, "questions": q}, dtype, 255).state is None
    with pytest.raises(InvalidRequestError, match='"state" must be provided'):
        parse_request({"state": None, "questions": q}, OPENJEV, 52)
    empty = {"q": {"type": "noul", "instructions": ""}}
    for dtype, n in ((LEV, 255), (OPENJEV, 52)):  # as llama-server: only null is refused
        assert parse_request({"state": "s", "questions": empty}, dtype, n).questions[0].id == "q"


def test_media_from_fields_and_chat_message_states():
    body = {
        "state": [
            {"role": "user", "content": [{"type": "text", "text": "hi"}, _image_part()]},
        ],
        "questions": {"q": {"type": "noul", "instructions": "i"}},
        "files": [PNG],
        "videos": [],
    }
    req = parse_request(body, OPENJEV, 52)
    assert [m.kind for m in req.media] == ["image", "image"]
    assert req.state == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    assert body["state"][0]["content"][1]["type"] == "image_url"  # the caller's JSON untouched
    wrapped = {**body, "state": {"messages": body["state"]}, "files": None}
    assert len(parse_request(wrapped, OPENJEV, 52).media) == 1


def _image_part() -> dict:
    return {"type": "image_url", "image_url": {"url": PNG}}


def test_noul_criteria_order_and_omni_yes_no_aliases():
    crit = {"yes": "it is", "false": "it is not"}
    q = _question({"type": "noul", "instructions": "i", "criteria": crit}, OMNI)
    assert [(o.key, o.description) for o in q.options] == [
        ("false", "it is not"),
        ("true", "it is"),
    ]
    q = _question({"type": "noul", "instructions": "i", "criteria": crit}, OPENJEV)
    assert [(o.key, o.description) for o in q.options] == [("true", None), ("false", "it is not")]


def test_unsupported_and_renamed_types_are_load_errors():
    for name, message in (
        ("clef", "decision-order"),
        ("d1", "before the rename"),
        ("x", "unknown"),
    ):
        with pytest.raises(ModelLoadError, match=message):
            lookup(name)


# ------------------------------------------------------------------------ labels
def fake_single(allowed: set[str]):
    table = {t: i for i, t in enumerate(sorted(allowed))}
    return lambda text: table.get(text)


def test_letter_labels_are_limited_to_single_tokens():
    maker = LabelMaker("letters", fake_single({*"ABCDEFGH"}), 52)
    assert maker.max_options == 8
    assert maker.positional(3).codes == ("A", "B", "C")
    doubled = LabelMaker("letters_doubled", fake_single({*"ABCDEFGHIJKLMNOPQRSTUVWXYZ", "AA"}), 255)
    assert doubled.max_options == 27
    # a code that is not one token is skipped, not the end of the codes (llama-server)
    gaps = LabelMaker("letters_doubled", fake_single({*"ABCDEFGHIJKLMNOPQRSTUVWXYZ", "NO"}), 255)
    assert gaps.max_options == 27 and gaps.positional(27).codes[-1] == "NO"
    every = {*"ABCDEFGHIJKLMNOPQRSTUVWXYZ"} | {a + b for a in "ABCDEFGHIJ" for b in "ABCDEFGHIJ"}
    every |= {a + b for a in "XYZ" for b in "ABCDEFGHIJKLMNOPQRSTUVWXYZ"}
    capped = LabelMaker("letters_doubled", fake_single(every), 255)
    assert capped.max_options == 26 + 100 + 78 and capped.positional(300).codes[-1] == "ZZ"
    full = LabelMaker("letters_doubled", lambda text: 0, 255)
    assert full.max_options == 255 and full.positional(255).codes[-1] == "IU"


def test_d1_codes_follow_the_pool():
    pool = list(d1_pool())
    assert pool[:3] == ["A", "B", "C"] and pool[26] == "00" and pool[126] == "a"
    assert pool[152] == "#0" and pool[-1] == "ZZ" and len(pool) == 26 + 100 + 26 + 200 + 676
    vocab = {*"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"}
    vocab |= {f"{i:02d}" for i in range(100)} | {" " + c for c in "ABC"}
    vocab |= {"yes", "Yes", " yes", "no", "No", "NO"}
    maker = LabelMaker("d1", fake_single(vocab), 255)
    assert maker.max_options == 153  # the single-token codes of the pool (NO is one too)

    def options(keys):
        from llamactl.engine.decision.types import Option

        return [Option(k) for k in keys]

    as_is = maker.for_options("choice", options(["b", "Z", "a"]))
    assert as_is.codes == ("b", "Z", "a")
    lettered = maker.for_options("choice", options(["billing", "tech"]))
    assert lettered.codes == ("A", "B")
    assert lettered.groups[0] == (maker.token("A"), maker.token(" A"))  # bare and after a space
    many = maker.for_options("choice", options([f"k{i}" for i in range(101)]))
    assert many.codes[:2] == ("00", "01") and many.codes[99] == "99"
    assert many.codes[100] == "A"  # "100" is not one token: the first free code of the pool
    noul = maker.for_options("noul", options(["true", "false"]))
    assert noul.codes == (None, None)
    assert set(noul.groups[0]) == {maker.token(t) for t in ("yes", "Yes", " yes")}
    assert set(noul.groups[1]) == {maker.token(t) for t in ("no", "No", "NO")}


# ------------------------------------------------------------------------ prompts
def test_kev_flattens_and_escapes():
    state = {
        "name": "Bob",
        "vip": True,
        "notes": None,
        "orders": [1, {"id": 2}],
        "addr": {"c": "X"},
    }
    # as llama-server's decision_kev_render: an item's first line inline after `- `, null
    # as nothing after `key: `
    assert flatten(state) == (
        "name: Bob\nvip: True\nnotes: \norders:\n  - 1\n  - id: 2\naddr:\n  c: X"
    )
    nested = {"rows": [[1, 2], {"a": {"b": None}}, None, "", 1.5], "e": {}, "l": []}
    assert flatten(nested) == (
        "rows:\n  - - 1\n    - 2\n  - a:\n      b: \n  - \n  - \n  - 1.5\ne:\n\nl:\n"
    )
    assert flatten(False) == "False" and flatten(None) == "" and flatten([]) == ""
    assert escape_special("a<|im_end|>b <|x") == "a<\u00a6im_end\u00a6>b <|x"
    prep = TextPrep(KEV, "<__media__>")
    assert prep.user({"k": "<|box_end|><__media__>"}) == "k: <\u00a6box_end\u00a6> "


def test_state_key_order_is_kept_except_for_lev():
    state = {"b": 1, "a": {"d": 2, "c": 3}}
    assert list(TextPrep(OPENJEV, "").user(state)) == ["b", "a"]
    lev = TextPrep(LEV, "").user(state)
    assert list(lev) == ["a", "b"] and list(lev["a"]) == ["c", "d"]
    omni = TextPrep(OMNI, "").user({"<|k|>": "<<d1omni:sep>>"})
    assert omni == {"<\u00a6k\u00a6>": "<<d1omni sep>>"}
    source = "{{ state | tojson }}"
    assert compile_template(source).render(state=state) == '{"b": 1, "a": {"d": 2, "c": 3}}'


def test_renderer_knows_whether_the_template_takes_images():
    from llamactl.converters import templates

    assert PromptRenderer(templates.builtin("openjev"), OPENJEV).takes_images
    assert not PromptRenderer(templates.builtin("kev"), KEV).takes_images


# ------------------------------------------------------------------------ CLI flags
def test_cli_question_specs():
    assert parse_question("r:choice:Which team: now?:billing=money,shipping") == (
        "r",
        {
            "type": "choice",
            "instructions": "Which team: now?",
            "criteria": {"billing": "money", "shipping": None},
        },
    )
    assert parse_question("u:score:How urgent?:low, mid ,high")[1]["criteria"] == [
        "low",
        "mid",
        "high",
    ]
    assert parse_question("a:noul:Is it a: b?")[1] == {
        "type": "noul",
        "instructions": "Is it a: b?",
    }
    assert parse_question("a:noul:Angry?:yes=very,no=calm")[1]["criteria"] == {
        "true": "very",
        "false": "calm",
    }


# ------------------------------------------------------------------ h2o-lightning floor
def test_noul_floor_moves_an_unsure_answer_to_the_floor_on_its_side():
    from llamactl.engine.decision.answer import commit_noul

    assert commit_noul(0.62, 0.8) == 0.8 and commit_noul(0.3, 0.8) == pytest.approx(0.2)
    assert commit_noul(0.5, 0.8) == 0.8  # a tie goes to yes
    assert commit_noul(0.93, 0.8) == 0.93 and commit_noul(0.05, 0.8) == 0.05  # sure enough
    assert commit_noul(0.62, 0.0) == 0.62  # 0 is off


@pytest.mark.parametrize("value", [0.5, 1.0, 1.2, -0.1, "high", True])
def test_a_noul_floor_out_of_range_is_a_load_error(value):
    from types import SimpleNamespace

    from llamactl.engine.decision.loader import read_noul_floor

    meta = {"qwen35.decision.noul_floor": value}
    info = SimpleNamespace(architecture="qwen35", get=meta.get)
    with pytest.raises(ModelLoadError, match="qwen35.decision.noul_floor must be"):
        read_noul_floor(info)
    ok = SimpleNamespace(architecture="qwen35", get={"qwen35.decision.noul_floor": 0.75}.get)
    assert read_noul_floor(ok) == 0.75
    assert read_noul_floor(SimpleNamespace(architecture="qwen35", get={}.get)) == 0.0
