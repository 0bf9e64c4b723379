"""The interactive commands' defaults (docs/cli.md, Defaults for reading): an answer limit,
repeat and DRY penalties through llama.cpp's sampler chain, and the loop guard, on the
embedded SmolLM2 that runs away at the old defaults; `serve` keeps llama-server's defaults.
"""

from __future__ import annotations

import io
import json
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from typer.testing import CliRunner

from llamactl import REPEATING_NOTE, RepetitionGuard
from llamactl.cli._output import PlainView
from llamactl.cli.chat import TurnOptions, stream_answer
from llamactl.cli.main import app
from llamactl.config import load_settings
from llamactl.config.interactive import INTERACTIVE, interactive_settings
from llamactl.engine_settings import sampling_defaults

# SmolLM2-135M at --temp 0 with no penalties answers this with "Les régions de la France, les
# régions de la France, ..." until the token limit
RUNAWAY = "Quelles sont les régions de la France ?"
OLD_DEFAULTS = ["--repeat-penalty", "1", "--dry-multiplier", "0"]


def chat_json(*args: str) -> dict:
    result = CliRunner().invoke(app, ["chat", "--temp", "0", "--json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


# ------------------------------------------------------------------ the guard alone
def test_the_guard_stops_a_phrase_repeated_back_to_back() -> None:
    guard = RepetitionGuard()
    text = "Les régions de la France, " + "les régions de la France, " * 12
    fed = ""
    for i in range(0, len(text), 4):
        fed += text[i : i + 4]
        if guard.feed(text[i : i + 4]):
            break
    assert guard.repeating and len(fed) < len(text)
    assert guard.feed("anything") is True  # stays stopped


@pytest.mark.parametrize(
    "text",
    [
        "| a | b |\n|---|---|\n" + "".join(f"| {i} | {i * i} |\n" for i in range(40)),
        ", ".join(str(i) for i in range(200)),
        "Paris, Lyon, Marseille, Toulouse, Nice, Nantes, Strasbourg, Montpellier. " * 3,
        "-" * 200,
    ],
)
def test_the_guard_lets_ordinary_answers_through(text: str) -> None:
    guard = RepetitionGuard()
    assert not any(guard.feed(text[i : i + 3]) for i in range(0, len(text), 3))


@pytest.mark.parametrize("loop", ["\U0001f31f" * 80, "Hello! " * 20, "la France, " * 12])
def test_the_speech_guard_stops_a_loop_early(loop: str) -> None:
    guard = RepetitionGuard.for_speech()
    fed = 0
    while fed < len(loop) and not guard.feed(loop[fed : fed + 2]):
        fed += 2
    assert guard.repeating and fed <= 60


@pytest.mark.parametrize(
    "text",
    [
        "The capital of France is Paris. It is known for the Eiffel Tower, the Louvre and the "
        "Seine, and for its cafes.",
        "One, two, three, four, five, six, seven, eight, nine, ten, eleven, twelve, thirteen.",
        "Ha ha, that is a good one! Well, well. Let me think: yes, yes, I know that song.",
    ],
)
def test_the_speech_guard_lets_spoken_answers_through(text: str) -> None:
    guard = RepetitionGuard.for_speech()
    assert not any(guard.feed(text[i : i + 3]) for i in range(0, len(text), 3))


# ----------------------------------------------------------------- which defaults
def test_chat_and_tui_defaults_differ_from_serves() -> None:
    served = load_settings({})
    assert served.max_tokens is None
    assert sampling_defaults(served).repeat_penalty == 1.0
    assert sampling_defaults(served).dry_multiplier == 0.0
    interactive = interactive_settings(served)
    assert interactive.max_tokens == INTERACTIVE.max_tokens == 1024
    sampling = sampling_defaults(interactive)
    assert sampling.repeat_penalty == INTERACTIVE.repeat_penalty
    assert sampling.dry_multiplier == INTERACTIVE.dry_multiplier
    assert str(interactive.sources["max_tokens"]) == "default (interactive)"


def test_a_given_value_wins_over_the_interactive_default(monkeypatch) -> None:
    monkeypatch.setenv("LLAMACTL_DRY_MULTIPLIER", "0")
    s = interactive_settings(load_settings({"max_tokens": -1, "repeat_penalty": 1.0}))
    assert s.max_tokens is None  # -1: no limit, as llama-server's -n -1
    assert s.repeat_penalty == 1.0 and s.dry_multiplier == 0.0


# ---------------------------------------------------------- the real runaway
@pytest.mark.slow
def test_the_runaway_at_the_old_defaults_without_the_guard() -> None:
    from llamactl.cli._engine import load_chat

    settings = load_settings({"temperature": 0.0, "max_tokens": 200})
    options = TurnOptions(sampling_defaults(settings), 200, loop_guard=False)
    with load_chat(settings) as loaded:
        messages = [{"role": "user", "content": RUNAWAY}]
        answer = stream_answer(
            loaded, messages, options, PlainView(io.StringIO(), io.StringIO(), True)
        )
    assert answer.done is not None and answer.done.finish_reason == "length"
    assert answer.content.count("les régions de la France, ") > 10


@pytest.mark.slow
def test_the_loop_guard_stops_the_runaway_and_says_so() -> None:
    got = chat_json(RUNAWAY, *OLD_DEFAULTS)
    assert got["finish_reason"] == "repeating"
    assert 0 < got["usage"]["completion_tokens"] < 120
    assert "les régions de la France, les régions de la France" in got["text"]
    plain = CliRunner().invoke(app, ["chat", "--temp", "0", RUNAWAY, *OLD_DEFAULTS])
    assert plain.exit_code == 0, plain.output
    assert REPEATING_NOTE in plain.stderr and REPEATING_NOTE not in plain.stdout


@pytest.mark.slow
def test_the_interactive_defaults_end_the_answer_on_their_own() -> None:
    got = chat_json(RUNAWAY)
    assert got["finish_reason"] == "stop", got
    assert got["text"].count("les régions de la France") <= 1


@pytest.mark.slow
def test_the_answer_limit_and_no_limit() -> None:
    assert chat_json(RUNAWAY, *OLD_DEFAULTS, "-n", "8")["usage"]["completion_tokens"] == 8
    # -1 lifts the limit: the guard (not a limit) ends the runaway
    assert chat_json(RUNAWAY, *OLD_DEFAULTS, "-n", "-1")["finish_reason"] == "repeating"


# ------------------------------------------------- DRY on the native /completion
def _native(server, **fields) -> httpx.Response:
    body = {"prompt": "Les régions de la France, les régions", "n_predict": 48, "temperature": 0}
    return httpx.post(server.url + "/completion", json={**body, **fields}, timeout=120)


@pytest.mark.slow
def test_dry_fields_change_the_native_completion_and_are_reported(server) -> None:
    plain = _native(server).json()
    dry = _native(server, dry_multiplier=2.0, dry_allowed_length=1).json()
    assert plain["content"].count("les régions") > dry["content"].count("les régions")
    settings = dry["generation_settings"]
    assert settings["dry_multiplier"] == 2.0 and settings["dry_allowed_length"] == 1
    assert settings["dry_sequence_breakers"] == ["\n", ":", '"', "*"]
    assert plain["generation_settings"]["dry_multiplier"] == 0.0  # the server's default: off


@pytest.mark.slow
def test_concurrent_dry_completions_equal_their_solo_runs(server) -> None:
    variants = [
        {"dry_multiplier": 0.8},
        {"dry_multiplier": 2.0, "dry_allowed_length": 1},
        {"dry_multiplier": 1.0, "dry_sequence_breakers": [","]},
        {"repeat_penalty": 1.3, "repeat_last_n": 16},
    ]
    solo = [_native(server, **v).json()["content"] for v in variants]
    with ThreadPoolExecutor(len(variants)) as pool:
        together = list(pool.map(lambda v: _native(server, **v).json()["content"], variants))
    assert together == solo


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"dry_sequence_breakers": []}, "dry_sequence_breakers must be a non-empty array"),
        ({"repeat_last_n": -1}, "Field 'repeat_last_n'"),
        ({"dry_penalty_last_n": -1}, "Field 'dry_penalty_last_n'"),
        ({"dry_multiplier": -1}, "Field 'dry_multiplier'"),
    ],
)
def test_bad_repetition_fields_are_refused(server, fields: dict, message: str) -> None:
    r = _native(server, **fields)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert message in error["message"] and error["type"] == "invalid_request_error"
