"""`llamactl score` on tiny converted decision models: the table, --json, --request, @file
states, images, --url against a live server, and its errors and exit codes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from imagekit import png
from llamactl.converters import convert
from serverkit import run_server
from synthetic_checkpoints import cached
from typer.testing import CliRunner

from llamactl.cli.main import app

pytestmark = pytest.mark.slow  # every test here loads a model

QUESTIONS = [
    "route:choice:Which team handles it?:billing=money matters,shipping,technical",
    "urgency:score:How urgent is it?:can wait,today,right now",
    "angry:noul:Is the customer angry?",
]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    out = tmp_path_factory.mktemp("score_models")
    openjev = cached(tmp_path_factory, "openjev")
    convert(openjev, out / "openjev.gguf")
    base = cached(tmp_path_factory, "qwen35-base")
    convert(cached(tmp_path_factory, "kev"), out / "kev.gguf", base=base)
    return out


def score(*args: Any, input: str | None = None) -> Any:
    argv = ["score", "--threads", "1", *map(str, args)]
    return CliRunner().invoke(app, argv, input=input)


def flags(model) -> list[str]:
    out = ["-m", str(model), "--state", "I was charged twice!"]
    for q in QUESTIONS:
        out += ["-q", q]
    return out


def test_answers_print_as_a_table(models):
    result = score(*flags(models / "openjev.gguf"))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["question", "type", "answer", "confidence", "probabilities"]
    assert [line.split()[0] for line in lines[1:4]] == ["route", "urgency", "angry"]
    assert "% yes)" in lines[3]
    assert lines[-1].startswith("openjev: ") and lines[-1].endswith("prompt tokens")


def test_json_is_the_systemone_response(models, tmp_path):
    result = score(*flags(models / "openjev.gguf"), "--json")
    assert result.exit_code == 0, result.output
    got = json.loads(result.stdout)
    assert list(got) == ["model", "answers", "usage"] and got["model"] == "openjev"
    assert list(got["answers"]["route"]["probabilities"]) == ["billing", "shipping", "technical"]
    assert got["answers"]["urgency"]["legend"] == {"0": "can wait", "1": "today", "2": "right now"}
    body = {
        "state": "I was charged twice!",
        "questions": {
            "route": {
                "type": "choice",
                "instructions": "Which team handles it?",
                "criteria": {"billing": "money matters", "shipping": None, "technical": None},
            },
            "urgency": {
                "type": "score",
                "instructions": "How urgent is it?",
                "criteria": ["can wait", "today", "right now"],
            },
            "angry": {"type": "noul", "instructions": "Is the customer angry?"},
        },
    }
    request = tmp_path / "body.json"
    request.write_text(json.dumps(body))
    again = score("-m", models / "openjev.gguf", "--request", request, "--json")
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout) == got
    piped = score("-m", models / "openjev.gguf", "--request", "-", "--json", input=json.dumps(body))
    assert json.loads(piped.stdout) == got


def test_a_json_file_state_is_an_object(models, tmp_path):
    state = {"customer": "Bob", "issue": "double charge"}
    (tmp_path / "state.json").write_text(json.dumps(state))
    (tmp_path / "state.txt").write_text(json.dumps(state))
    q = ["-q", "angry:noul:Is the customer angry?", "--json"]
    from_file = score("-m", models / "openjev.gguf", "--state", f"@{tmp_path / 'state.json'}", *q)
    as_text = score("-m", models / "openjev.gguf", "--state", f"@{tmp_path / 'state.txt'}", *q)
    inline = score("-m", models / "openjev.gguf", "--state", json.dumps(state), *q)
    for result in (from_file, as_text, inline):
        assert result.exit_code == 0, result.output
    # an object renders as its JSON text: the same prompt as that text given as a string
    assert json.loads(from_file.stdout)["usage"] == json.loads(inline.stdout)["usage"]
    assert json.loads(as_text.stdout) == json.loads(inline.stdout)


def test_a_head_model_runs_from_its_trunk_copy(models):
    result = score(*flags(models / "kev.gguf"), "--json")
    assert result.exit_code == 0, result.output
    assert "trunk-only copy" in result.stderr and "MiB" in result.stderr
    assert list(json.loads(result.stdout)["answers"]) == ["route", "urgency", "angry"]


def test_images(models, tmp_path):
    image = tmp_path / "receipt.png"
    image.write_bytes(png(32, 24))
    result = score(*flags(models / "kev.gguf"), "--image", image)
    assert result.exit_code == 1 and "does not take images" in result.stderr
    result = score(*flags(models / "openjev.gguf"), "--image", image)
    assert result.exit_code == 1 and "mmproj" in result.stderr  # none beside this copy


def test_url_sends_the_request_to_a_server(models):
    local = score(*flags(models / "openjev.gguf"), "--json")
    with run_server(model=str(models / "openjev.gguf"), threads=1, alias="openjev") as live:
        remote = score(*flags(models / "openjev.gguf"), "--json", "--url", live.url)
    assert remote.exit_code == 0, remote.output
    a, b = json.loads(local.stdout), json.loads(remote.stdout)
    assert a["usage"] == b["usage"] and a["answers"].keys() == b["answers"].keys()
    assert a["answers"]["angry"]["noul"] == pytest.approx(b["answers"]["angry"]["noul"], abs=1e-3)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--state", "x", "-q", "route:pick:Which?:a,b"], "TYPE must be choice, score or noul"),
        (["--state", "x", "-q", "route"], "expected ID:TYPE:INSTRUCTIONS"),
        (["--state", "x", "-q", "route:choice:Which?"], "a choice needs its options"),
        (["-q", "a:noul:Is it?"], "give the state with --state"),
        (["--state", "x"], "give at least one --question"),
        (["--request", "-", "-q", "a:noul:x"], "--request holds the whole request"),
    ],
)
def test_usage_errors_exit_2(models, args, message):
    result = score("-m", models / "openjev.gguf", *args)
    assert result.exit_code == 2 and message in result.stderr


def test_errors_exit_1(models):
    result = score("--state", "x", "-q", "a:noul:Is it?")  # the embedded chat model
    assert result.exit_code == 1 and "is not a decision model" in result.stderr
    too_many = ",".join(f"o{i}" for i in range(60))
    result = score(
        "-m", models / "openjev.gguf", "--state", "x", "-q", f"a:choice:Which?:{too_many}"
    )
    assert result.exit_code == 1
    assert "questions.a: too many options (60), this model supports at most 52" in result.stderr


def test_chat_refuses_a_decision_model_with_the_servers_message(models):
    """A decision model generates no text: `chat` says so and exits 1 (not an empty answer
    and 0), in the words of the server's 501."""
    for args in (["hi"], ["hi", "--json"]):
        result = CliRunner().invoke(app, ["chat", "-m", str(models / "openjev.gguf"), *args])
        assert result.exit_code == 1, result.output
        assert result.stdout == ""
        assert "is a decision model" in result.stderr
        assert "does not generate text" in result.stderr and "llamactl score" in result.stderr
