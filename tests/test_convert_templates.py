"""The `systemone` templates the converters embed render the spec's prompt layouts (5.7), in
the same sandbox the engine renders chat templates with."""

from __future__ import annotations

import shutil

import pytest
from llamactl.converters import convert, templates
from synthetic_checkpoints import cached, read_gguf

from llamactl.engine.chat.environment import compile_template

OPTIONS = [
    {"key": "billing", "description": "Money matters", "label": "A"},
    {"key": "tech_support", "description": None, "label": "B"},
]
NOUL = [
    {"key": "true", "description": "It is broken", "label": "A"},
    {"key": "false", "description": None, "label": "B"},
]
SCORE = [
    {"key": "0", "description": "can wait", "label": "A"},
    {"key": "1", "description": "today", "label": "B"},
    {"key": "2", "description": "right now", "label": "C"},
]


def render(decision_type: str, **variables) -> str:
    base = {"id": "q", "images": [], "state": "ticket", "instructions": "Route it"}
    return compile_template(templates.builtin(decision_type)).render(**(base | variables))


def test_openjev_choice_layout():
    """llama.cpp's layout: `name: ` even without a description, letters by position (the
    labels the server passes are not read: llama-server passes none for openjev)."""
    unlabelled = [{k: v for k, v in o.items() if k != "label"} for o in OPTIONS]
    got = render("openjev", type="choice", options=unlabelled)
    assert got == (
        "<|im_start|>user\nState:\nticket\n\nQuestion: Route it\nOptions:\n"
        "[A] billing: Money matters\n[B] tech_support: \n\n"
        "Answer with the letter of the best option only.<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )


def test_openjev_object_state_keeps_key_order_and_score_hint():
    got = render("openjev", type="score", options=SCORE, state={"b": 1, "a": [1, "x"]})
    assert 'State:\n{"b": 1, "a": [1, "x"]}\n' in got
    assert "Question: Route it Rate along the ordered levels below (lowest first).\n" in got
    assert "[C] 2: right now\n" in got
    noul = render("openjev", type="noul", options=NOUL)
    assert "[A] yes: It is broken\n[B] no: The statement is false.\n\n" in noul
    bare = [{**o, "description": None} for o in NOUL]
    assert "[A] yes: The statement is true.\n[B] no: The statement is false.\n" in render(
        "openjev", type="noul", options=bare
    )
    shown = render("openjev", type="choice", options=OPTIONS, images=["<m>", "<m>"])
    assert shown.startswith(
        "<|im_start|>user\n<m><m>The screenshot shows the current screen.\nState:\n"
    )


def test_lev_layouts():
    choice = render("lev", type="choice", options=OPTIONS)
    assert choice.startswith(f"<|im_start|>system\n{templates.LEV_SYSTEM}<|im_end|>\n")
    assert (
        "<|im_start|>user\n# Evidence\nticket\n\n# Criterion\nRoute it\n\n# Options\n"
        "A. billing: Money matters\nB. tech_support\n\n"
        "Respond with only the letter of the best option.\n<|im_end|>\n"
    ) in choice
    score = render("lev", type="score", options=SCORE)
    assert "A. (level 0 of 2) can wait\n" in score and "the level that best matches." in score
    noul = render("lev", type="noul", options=NOUL)
    assert (
        "# Scale\n0 = certainly no ... 8 = certainly yes\nyes: It is broken\n\n"
        "Respond with only a digit from 0 to 8.\n<|im_end|>"
    ) in noul


def test_kev_layout_has_one_marker_per_option():
    got = render("kev", type="choice", options=OPTIONS, state="name: Bob")
    assert got == (
        "<|fim_prefix|>name: Bob<|fim_middle|>Route it<|box_start|>billing: Money matters"
        "<|box_end|><|box_start|>tech_support<|box_end|><|fim_suffix|>"
    )
    noul = render("kev", type="noul", options=NOUL)
    assert "<|box_start|>yes: It is broken<|box_end|><|box_start|>no<|box_end|>" in noul


def test_lfm2_d1_layouts():
    choice = render("lfm2-d1", type="choice", options=OPTIONS, state={"x": 1}, images=["<IMG>"])
    assert choice == (
        '<|startoftext|><|im_start|>user\n<IMG>{\n  "x": 1\n}\n\n\nQUESTION:\nRoute it\n\n'
        "Options:\nA Money matters\nB tech support\n\nReply with the option code only."
        "<|im_end|>\n<|im_start|>assistant\n"
    )
    no_state = render("lfm2-d1", type="noul", options=NOUL, state=None)
    assert no_state == (
        "<|startoftext|><|im_start|>user\nRoute it\nYes: It is broken\nNo: None\n\n"
        "Reply with yes or no only.<|im_end|>\n<|im_start|>assistant\n"
    )
    bare = render("lfm2-d1", type="noul", options=[dict(o, description=None) for o in NOUL])
    assert "QUESTION:\nRoute it\n\nReply with yes or no only." in bare
    score = render("lfm2-d1", type="score", options=SCORE)
    assert (
        "Route it\n\n0 can wait\n1 today\n2 right now\n\nReply with a single digit 0-2 only."
        in (score)
    )


def test_lfm2_d1_omni_pieces():
    got = render(
        "lfm2-d1-omni",
        type="choice",
        options=OPTIONS,
        sep="|SEP|",
        mark_state="<S>",
        mark_question="<Q>",
        mark_option="<O>",
        audio=False,
    )
    assert got.split("|SEP|") == [
        "",
        "<|startoftext|><|reserved_7|>",
        "<S>ticket",
        "<Q><|reserved_8|>Route it",
        "<|reserved_9|><|mask|>",
        "<O> billing: Money matters",
        "<|reserved_10|>",
        "<|reserved_9|><|mask|>",
        "<O> tech_support",
        "<|reserved_10|>",
        "<|reserved_11|>",
    ]


def test_minicpm_ocr_jev_is_a_fixed_prompt():
    got = render("openbmb-minicpm-ocr-jev", type="choice", options=[], images=["<IMG>"])
    assert got == ("<|im_start|>user\n<IMG>\nOCR text:\nticket<|im_end|>\n<|im_start|>assistant\n")


def test_a_checkpoint_keeps_its_own_systemone_template(tmp_path_factory, tmp_path):
    src = tmp_path / "d1"
    shutil.copytree(cached(tmp_path_factory, "lfm2-d1"), src)
    (src / "systemone.jinja").write_text("{{ instructions }}", encoding="utf-8")
    convert(src, tmp_path / "d1.gguf", dry_run=False)
    meta, _ = read_gguf(tmp_path / "d1.gguf")
    assert meta["tokenizer.chat_template.systemone"] == "{{ instructions }}"


@pytest.mark.parametrize("decision_type", sorted(templates.BUILTIN))
def test_every_template_is_one_line(decision_type):
    # newlines are expressions, so trim_blocks / lstrip_blocks cannot change the output
    assert "\n" not in templates.builtin(decision_type)
    assert "\n" not in templates.h2o_lightning(system="Be\nbrief", layout="markdown")


def h2o(contract: dict | None = None, **variables) -> str:
    source = templates.h2o_lightning(**({"system": 'Sys {{ x }} "q"'} | (contract or {})))
    base = {"id": "q", "images": [], "state": "ticket", "instructions": "Route it"}
    return compile_template(source).render(**(base | variables))


TAIL = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nAnswer:"


def test_h2o_lightning_layouts():
    # the system text is kept verbatim, Jinja-looking parts included
    assert h2o(type="choice", options=OPTIONS) == (
        '<|im_start|>system\nSys {{ x }} "q"<|im_end|>\n<|im_start|>user\nrecord: ticket\n'
        "question: Route it\noptions:\nA) billing: Money matters\nB) tech_support: tech_support"
        + TAIL
    )
    # a score's levels; an object state as compact JSON; instructions that are not a string
    got = h2o(type="score", options=SCORE, state={"a": "é", "b": [1, 2]}, instructions={"k": 1})
    assert got.split("user\n", 1)[1] == (
        'record: {"a":"é","b":[1,2]}\nquestion: {\n "k": 1\n}\noptions:\n'
        "A) 0: can wait\nB) 1: today\nC) 2: right now" + TAIL
    )
    # noul: a missing description has the contract's default; blank instructions too
    got = h2o(type="noul", options=NOUL, instructions="  ")
    assert got.endswith(
        "question: Answer the question below.\noptions:\n"
        "A) true: It is broken\nB) false: it does not" + TAIL
    )
    # no system prompt, the markdown layout, an indented state, another prefill
    contract = {"system": None, "layout": "markdown", "state_compact": False, "prefill": "Ans:"}
    got = h2o(contract, type="choice", options=OPTIONS[:1], state={"a": "é"})
    assert got == (
        '<|im_start|>user\n### RECORD\n{\n "a": "\\u00e9"\n}\n\n### QUESTION\nRoute it\n\n'
        "### OPTIONS\nA) billing: Money matters<|im_end|>\n<|im_start|>assistant\n<think>\n\n"
        "</think>\n\nAns:"
    )
    with pytest.raises(ValueError, match="layout 'xml' is not supported"):
        templates.h2o_lightning(system=None, layout="xml")
