"""`llamactl chat --continue` and the REPL's `/load`: a conversation that outlives a run, and
one that moves to another model. The saved chat is read back with its hostile inputs."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from llamactl.cli import _engine
from llamactl.cli._chat_session import (
    MAX_SESSION_BYTES,
    ChatHistory,
    last_session_path,
    read_session,
    write_session,
)
from llamactl.cli.chat import Repl, TurnOptions
from llamactl.cli.main import app
from llamactl.config import load_settings
from llamactl.core.errors import InvalidRequestError
from llamactl.engine.types import SamplingParams
from llamactl.models import embedded_model_path

GREEDY = ["--temp", "0", "-n", "8"]


def chat_json(*args: str) -> dict[str, Any]:
    result = CliRunner().invoke(app, ["chat", *GREEDY, "--json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


# ---------------------------------------------------------------- --continue, for real
@pytest.mark.slow
def test_continue_goes_on_with_the_last_chat() -> None:
    first = chat_json("My name is Ada.")
    saved = json.loads(last_session_path().read_text())
    assert [m["role"] for m in saved["messages"]] == ["user", "assistant"]
    assert saved["messages"][1]["content"] == first["text"]

    second = chat_json("--continue", "What is my name?")
    alone = chat_json("What is my name?")  # the same question without the history
    assert second["usage"]["prompt_tokens"] > alone["usage"]["prompt_tokens"]
    saved = json.loads(last_session_path().read_text())
    assert len(saved["messages"]) == 2  # the last run was a new chat: it is the last one now

    chat_json("My name is Ada.")
    chat_json("--continue", "What is my name?")
    saved = json.loads(last_session_path().read_text())
    assert [m["content"] for m in saved["messages"][::2]] == ["My name is Ada.", "What is my name?"]


def test_continue_with_no_saved_chat_is_a_clean_error_before_loading(monkeypatch) -> None:
    def no_load(*args: object, **kw: object) -> None:
        raise AssertionError("the model was loaded for nothing")

    monkeypatch.setattr(_engine, "load_chat", no_load)
    result = CliRunner().invoke(app, ["chat", "--continue", "Hi"])
    assert result.exit_code == 1
    assert "no chat to continue yet" in result.stderr and "Traceback" not in result.output


def test_continue_keeps_the_system_prompt_unless_one_is_given(monkeypatch) -> None:
    write_session(last_session_path(), "m", ChatHistory("Be terse.", []))
    from llamactl.cli.chat import continued_history

    assert continued_history(None).system == "Be terse."
    assert continued_history("Be kind.").system == "Be kind."


# ----------------------------------------------------------- reading a saved chat back
def _deep(n: int) -> bytes:
    return b'{"messages": ' + b"[" * n + b"]" * n + b"}"


HOSTILE: list[tuple[str, Any, str]] = [
    ("not json", b"hello", "not JSON"),
    ("not utf-8", b"\xff\xfe\x00", "not JSON"),
    ("truncated", b'{"messages": [{"role": "user", "content": "Hi"}', "not JSON"),
    ("a list", b"[]", "a JSON object was expected"),
    ("messages not a list", b'{"messages": {}}', "`messages` must be a list"),
    ("wrong role order", b'{"messages": [{"role": "assistant", "content": "x"}]}', "message 0"),
    ("content not text", b'{"messages": [{"role": "user", "content": 3}]}', "message 0"),
    ("unanswered", b'{"messages": [{"role": "user", "content": "x"}]}', "has no answer"),
    ("system not text", b'{"system": [], "messages": []}', "`system` must be text"),
    ("deep", _deep(100_000), "not JSON"),
    ("huge", "huge", "over the limit"),
    ("fifo", "fifo", "not a regular file"),
    ("directory", "directory", "cannot read"),
]


@pytest.mark.parametrize(("case", "content", "message"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_a_bad_saved_chat_is_refused_plainly(tmp_path: Path, case, content, message) -> None:
    path = tmp_path / "chat.json"
    if content == "huge":
        with open(path, "wb") as f:
            f.truncate(MAX_SESSION_BYTES + 1)  # sparse: nothing is written or read
    elif content == "fifo":
        os.mkfifo(path)
    elif content == "directory":
        path.mkdir()
    else:
        path.write_bytes(content)
    done = threading.Event()
    errors: list[BaseException] = []

    def read() -> None:
        try:
            read_session(path)
        except BaseException as e:  # noqa: BLE001 - the test looks at it below
            errors.append(e)
        done.set()

    threading.Thread(target=read, daemon=True).start()
    assert done.wait(10), "reading the saved chat hung"
    [error] = errors
    assert isinstance(error, InvalidRequestError), error
    assert message in str(error)


def test_a_saved_chat_reads_back_as_written(tmp_path: Path) -> None:
    history = ChatHistory("Sys", [{"role": "user", "content": "é"}])
    history.turns.append({"role": "assistant", "content": "ok"})
    write_session(tmp_path / "c.json", "model-x", history)
    assert read_session(tmp_path / "c.json") == ("model-x", history)


# ------------------------------------------------------------------------ /load, for real
class Recorder:
    """The model the REPL starts with, to see it closed once another takes over."""

    name = "first"
    closed = False

    def close(self) -> None:
        self.closed = True


@pytest.mark.slow
def test_load_moves_the_conversation_to_another_model(capsys) -> None:
    settings = load_settings({"threads": 2, "n_ctx": 1024})
    history = ChatHistory(None, [{"role": "user", "content": "Hi"}])
    history.turns.append({"role": "assistant", "content": "Hello."})
    first = Recorder()
    repl = Repl(first, history, TurnOptions(SamplingParams(temperature=0), 8), settings)  # type: ignore[arg-type]

    repl.command("/load no-such-model")
    assert repl.loaded is first and not first.closed
    assert "was not found" in capsys.readouterr().err

    repl.command(f"/load {embedded_model_path()}")
    try:
        assert first.closed and repl.loaded is not first
        assert "(1 turns so far)" in capsys.readouterr().out
        repl.turn("And now?")
        assert len(repl.history.turns) == 4  # answered by the new model, with the history
        saved = json.loads(last_session_path().read_text())
        assert saved["model"] == repl.loaded.name and len(saved["messages"]) == 4
    finally:
        repl.loaded.close()


def test_load_alone_shows_its_usage(capsys) -> None:
    repl = Repl(Recorder(), ChatHistory(), TurnOptions(SamplingParams(), 8), None)  # type: ignore[arg-type]
    repl.command("/load")
    assert "Usage: /load MODEL" in capsys.readouterr().out
