"""`llamactl chat` one-shot, piped and --json modes, flags, settings and errors.

Tests marked slow run the real embedded SmolLM2 (greedy, a few tokens: well under a second
each); the others swap the engine for a scripted fake so they can exercise reasoning output,
which the small model never produces.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
import typer.main
from rich.console import Console
from typer.testing import CliRunner

from llamactl.cli import _engine
from llamactl.cli._output import PlainView, RichView, whole_blocks
from llamactl.cli.chat import ChatHistory, Repl, TurnOptions, ask, join_prompt
from llamactl.cli.main import app
from llamactl.core.errors import ContextLengthError
from llamactl.engine.types import (
    ContentDelta,
    Done,
    ReasoningDelta,
    SamplingParams,
    Timings,
    Usage,
)

GREEDY = ["--temperature", "0"]


def invoke(*args: str, input: str | None = None, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(app, list(args), input=input, env=env)


def run_json(*args: str, input: str | None = None) -> dict[str, Any]:
    result = invoke("chat", *GREEDY, "--json", *args, input=input)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


# ------------------------------------------------------------- a fake engine
@dataclass
class FakeStream:
    events: list[Any]
    cancelled: bool = False

    def __iter__(self) -> Iterator[Any]:
        yield from self.events

    def cancel(self) -> None:
        self.cancelled = True


@dataclass
class FakeChat:
    """Plays back a reasoning block, then an answer; records what it was asked."""

    reasoning: str = "Let me think about it."
    content: str = "The answer is **42**."
    requests: list[Any] = field(default_factory=list)

    def start(self, request: Any) -> FakeStream:
        self.requests.append(request)
        done = Done("stop", Usage(prompt_tokens=7, completion_tokens=5), Timings(7, 10.0, 5, 50.0))
        events: list[Any] = [ReasoningDelta(w) for w in re.findall(r"\S+\s*", self.reasoning)]
        events += [ContentDelta("\n\n"), ContentDelta(self.content), done]
        return FakeStream(events)


@dataclass
class FakeLoaded:
    chat: FakeChat = field(default_factory=FakeChat)
    name: str = "fake-model"
    source: str = "path"

    def __enter__(self) -> FakeLoaded:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeLoaded:
    loaded = FakeLoaded()
    monkeypatch.setattr(_engine, "load_chat", lambda settings, **kw: loaded)
    return loaded


# ------------------------------------------------------------ the real model
@pytest.mark.slow
def test_one_shot_prints_a_plain_answer() -> None:
    result = invoke("chat", "What is the capital of France?", *GREEDY, "-n", "16")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip()
    assert "\x1b[" not in result.output  # not a terminal: no colour, no cursor moves
    assert "Traceback" not in result.output


@pytest.mark.slow
def test_greedy_answers_repeat_exactly() -> None:
    first = invoke("chat", "Name a colour.", *GREEDY, "--max-tokens", "12")
    second = invoke("chat", "Name a colour.", *GREEDY, "--max-tokens", "12")
    assert first.exit_code == second.exit_code == 0
    assert first.stdout == second.stdout


@pytest.mark.slow
def test_json_output_has_every_field() -> None:
    data = run_json("Say hello.", "--max-tokens", "4")
    assert set(data) == {"text", "reasoning", "finish_reason", "usage", "timings", "model"}
    assert data["finish_reason"] == "length"
    assert data["usage"]["completion_tokens"] == 4
    assert data["usage"]["total_tokens"] == (
        data["usage"]["prompt_tokens"] + data["usage"]["completion_tokens"]
    )
    assert data["timings"]["predicted_n"] == 4
    assert data["timings"]["prompt_per_second"] > 0
    assert data["model"] == "SmolLM2-135M-Instruct.Q4_1"
    assert data["text"]


@pytest.mark.slow
def test_prompt_from_stdin() -> None:
    result = invoke("chat", *GREEDY, "-n", "8", input="Say hello.\n")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip()
    piped = run_json("-n", "1", input="Say hello.\n")
    argument = run_json("Say hello.", "-n", "1")
    assert piped["usage"]["prompt_tokens"] == argument["usage"]["prompt_tokens"]


@pytest.mark.slow
def test_piped_text_comes_before_the_prompt() -> None:
    alone = run_json("Summarise this.", "-n", "1")
    both = run_json("Summarise this.", "-n", "1", input="A long text about llamas.\n")
    assert both["usage"]["prompt_tokens"] > alone["usage"]["prompt_tokens"]


@pytest.mark.slow
def test_system_prompt_reaches_the_model() -> None:
    plain = run_json("Hi", "-n", "1")
    with_system = run_json("Hi", "-n", "1", "--system", "You answer in French, briefly.")
    assert with_system["usage"]["prompt_tokens"] != plain["usage"]["prompt_tokens"]


@pytest.mark.slow
def test_settings_come_from_env_and_config_with_flags_first(
    monkeypatch: pytest.MonkeyPatch, isolated_dirs: Any
) -> None:
    isolated_dirs.config_file.parent.mkdir(parents=True)
    isolated_dirs.config_file.write_text("max_tokens = 3\ntemperature = 0.0\n")
    assert run_json("Hi")["usage"]["completion_tokens"] == 3
    monkeypatch.setenv("LLAMACTL_MAX_TOKENS", "2")
    assert run_json("Hi")["usage"]["completion_tokens"] == 2
    assert run_json("Hi", "-n", "1")["usage"]["completion_tokens"] == 1


@pytest.mark.slow
def test_show_timings_goes_to_stderr() -> None:
    result = invoke("chat", "Hi", *GREEDY, "-n", "4", "--show-timings")
    assert result.exit_code == 0, result.output
    assert "tokens/s" in result.stderr
    assert "tokens/s" not in result.stdout


@pytest.mark.slow
def test_model_given_as_a_path(tmp_path: Any) -> None:
    from llamactl.models import embedded_model_path

    path = embedded_model_path()
    assert path is not None
    link = tmp_path / "tiny.gguf"
    link.symlink_to(path)
    data = run_json("Hi", "-n", "1", "--model", str(link))
    assert data["model"] == "tiny"


@pytest.mark.slow
@pytest.mark.slow
def test_python_dash_m_runs_the_cli() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "llamactl", "chat", "Hi", "--temp", "0", "-n", "2", "--json"],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["usage"]["completion_tokens"] == 2


# ----------------------------------------------------------- flags and errors
def test_version() -> None:
    result = invoke("--version")
    assert result.exit_code == 0
    assert result.stdout.strip() == f"llamactl {version('llamactl-cli')}"


def test_no_arguments_shows_help() -> None:
    result = invoke()
    assert "chat" in result.output and "models" in result.output


def test_help_has_examples() -> None:
    result = invoke("chat", "--help")
    assert result.exit_code == 0
    assert "Examples" in result.stdout
    for flag in ("--model", "--system", "--temperature", "--seed", "--max-tokens"):
        assert flag in result.stdout
    for flag in ("--ctx-size", "--threads", "--show-timings", "--json", "--hide-reasoning"):
        assert flag in result.stdout
    assert "--top-k" not in result.stdout  # one screen: the rest under --help-all
    assert "more options" in result.stdout and "llamactl chat --help-all" in result.stdout
    every = invoke("chat", "--help-all").stdout
    assert "--top-p" in every and "--top-k" in every and "--dry-multiplier" in every


EVERY_COMMAND = [
    *(("chat", f) for f in ("--help", "--help-all")),
    *(("serve", f) for f in ("--help", "--help-all")),
    *((c, "--help") for c in ("transcribe", "tts", "score", "convert", "pull", "quantize")),
    *((c, "--help") for c in ("models", "ps", "stop", "tui")),
]


@pytest.mark.parametrize(("command", "flag"), EVERY_COMMAND)
def test_help_fits_80_columns_and_cuts_no_name(command: str, flag: str) -> None:
    """Plain text at 80 columns: no line wider, every option's name whole; --help fits a
    screen or two, --help-all has everything."""
    result = invoke(command, flag, env={"COLUMNS": "80"})
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "…" not in result.stdout
    if flag == "--help":
        assert len(lines) <= 90
    names = re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]+)", result.stdout)
    commands = typer.main.get_command(app).commands.values()  # help may name another's flag
    params = [p for c in commands for p in c.params]
    known = {o for p in params for o in (*p.opts, *getattr(p, "secondary_opts", ()))}
    known |= {"--help", "--usage"}
    assert set(names) <= known  # a cut name ("--chat-template-f") would not be an option
    usage = lines[0]  # one style: MODEL when required, [PROMPT] when not
    assert usage.startswith(f"Usage: llamactl {command} [OPTIONS]") and "{" not in usage
    assert usage == usage.upper().replace("USAGE: LLAMACTL", "Usage: llamactl").replace(
        command.upper(), command, 1
    )


def test_missing_model_is_one_clean_error() -> None:
    result = invoke("chat", "Hi", "--model", "no-such-model")
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: model 'no-such-model' was not found")
    assert "Traceback" not in result.output
    assert result.stdout == ""


def test_unknown_flag_is_a_usage_error() -> None:
    result = invoke("chat", "Hi", "--no-such-flag")
    assert result.exit_code == 2
    assert "no-such-flag" in result.output


def test_bad_flag_type_is_a_usage_error() -> None:
    assert invoke("chat", "Hi", "--max-tokens", "many").exit_code == 2


def test_out_of_range_setting_is_a_clean_error() -> None:
    result = invoke("chat", "Hi", "--top-p", "5")
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: top_p must be between")


def test_bad_env_value_is_a_clean_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLAMACTL_TEMPERATURE", "hot")
    result = invoke("chat", "Hi")
    assert result.exit_code == 1
    assert "LLAMACTL_TEMPERATURE" in result.stderr


def test_no_prompt_without_a_terminal_is_a_usage_error() -> None:
    result = invoke("chat", input="")
    assert result.exit_code == 2
    assert "no prompt" in result.stderr


def test_unexpected_errors_are_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(settings: Any, **kw: Any) -> Any:
        raise RuntimeError("kaboom")

    monkeypatch.setattr(_engine, "load_chat", boom)
    result = invoke("chat", "Hi")
    assert result.exit_code == 1
    assert result.stderr.splitlines()[0].startswith("Error: unexpected RuntimeError: kaboom")
    assert "Traceback" not in result.output


def test_engine_errors_are_clean(fake: FakeLoaded, monkeypatch: pytest.MonkeyPatch) -> None:
    def too_long(request: Any) -> Any:
        raise ContextLengthError(5000, 4096)

    monkeypatch.setattr(fake.chat, "start", too_long)
    result = invoke("chat", "Hi")
    assert result.exit_code == 1
    assert "exceeds the available context size" in result.stderr


# ------------------------------------------------------- reasoning and views
def test_flags_become_the_request(fake: FakeLoaded) -> None:
    args = ["--temp", "0.5", "--top-p", "0.9", "--top-k", "7", "--seed", "11", "-n", "99"]
    result = invoke("chat", "Hi", "-s", "Be brief.", *args)
    assert result.exit_code == 0, result.output
    request = fake.chat.requests[0]
    assert request.messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
    ]
    assert request.max_tokens == 99
    s = request.sampling
    assert (s.temperature, s.top_p, s.top_k, s.seed) == (0.5, 0.9, 7, 11)


def test_plain_output_keeps_reasoning_off_stdout(fake: FakeLoaded) -> None:
    result = invoke("chat", "Hi")
    assert result.exit_code == 0
    assert result.stdout == "The answer is **42**.\n"
    assert "Let me think about it." in result.stderr


def test_hide_reasoning(fake: FakeLoaded) -> None:
    result = invoke("chat", "Hi", "--hide-reasoning")
    assert result.stdout == "The answer is **42**.\n"
    assert "think" not in result.stderr


def test_json_carries_reasoning(fake: FakeLoaded) -> None:
    result = invoke("chat", "Hi", "--json")
    data = json.loads(result.stdout)
    assert data["reasoning"] == "Let me think about it."
    assert data["text"] == "The answer is **42**."
    assert data["model"] == "fake-model"
    assert data["timings"]["predicted_per_second"] == 100.0


def test_rich_view_renders_markdown_and_dim_reasoning() -> None:
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, color_system="standard", width=60)
    view = RichView(console, show_reasoning=True)
    options = TurnOptions(SamplingParams(), None)
    conversation = ChatHistory()
    answer = ask(FakeLoaded(), conversation, "Hi", options, view)  # type: ignore[arg-type]
    out = buf.getvalue()
    assert "\x1b[2;3m" in out  # dim italic reasoning
    assert "Let me think about it." in out
    assert "**" not in out.split("Let me think")[-1]  # bold rendered, not shown as stars
    assert "42" in out
    assert answer.content.strip() == "The answer is **42**."
    assert conversation.turns[-1] == {"role": "assistant", "content": "The answer is **42**."}


def test_rich_view_puts_each_finished_block_in_the_scrollback_while_streaming() -> None:
    """A long answer on a short terminal: its first paragraphs are printed for good while it
    streams (the live region keeps only the block being written), so scrolling back shows
    them before the answer ends."""
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, color_system="standard", width=60, height=8)
    view = RichView(console, show_reasoning=True)
    view.start()
    view.reasoning("First thought.\n\nSecond thought.")
    view.content("\n\n")
    for i in range(20):
        view.content(f"Paragraph **{i}** of the answer.\n\n")
    view.content("```python\nx = 1\n\ny = 2\n")  # a fence still open: not printed yet
    ansi = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
    streaming = ansi.sub("", buf.getvalue())
    view.close("", "", interrupted=False)
    assert "First thought." in streaming and "Second thought." in streaming
    assert all(f"Paragraph {i} of the answer." in streaming for i in range(20))
    assert "**" not in streaming  # printed as Markdown
    assert ansi.sub("", buf.getvalue()).count("Paragraph 0 of the answer.") == 1  # for good
    assert "y = 2" in ansi.sub("", buf.getvalue())


@pytest.mark.parametrize(
    ("text", "whole"),
    [
        ("a\n\nb", "a\n\n"),
        ("a\nb", ""),
        ("```\nx\n\ny\n", ""),  # a blank line inside an open fence ends nothing
        ("```\nx\n\n```\n\nz", "```\nx\n\n```\n\n"),
        ("a\n\n   \n", "a\n\n   \n"),
    ],
)
def test_whole_blocks_stop_at_the_last_blank_line_outside_a_fence(text: str, whole: str) -> None:
    assert text[: whole_blocks(text)] == whole


def test_plain_view_writes_streams_separately() -> None:
    out, err = io.StringIO(), io.StringIO()
    view = PlainView(out, err, show_reasoning=True)
    view.start()
    view.reasoning("hmm")
    view.content("\n\n")
    view.content("Yes.")
    view.close("\n\nYes.", "hmm", interrupted=True)
    assert out.getvalue() == "Yes.\n"
    assert err.getvalue() == "hmm\n[interrupted]\n"


# --------------------------------------------------------------- pure helpers
def test_conversation_keeps_history_without_reasoning() -> None:
    c = ChatHistory(system="Be nice.")
    c.add("Hi", "Hello!")
    assert c.messages_for("Again") == [
        {"role": "system", "content": "Be nice."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "Again"},
    ]
    c.reset()
    assert c.messages_for("x") == [
        {"role": "system", "content": "Be nice."},
        {"role": "user", "content": "x"},
    ]


@pytest.mark.parametrize(
    ("piped", "prompt", "expected"),
    [
        (None, None, None),
        ("", None, None),
        ("  \n", "Q", "Q"),
        ("text\n", None, "text"),
        ("text\n", "Q", "text\n\nQ"),
    ],
)
def test_join_prompt(piped: str | None, prompt: str | None, expected: str | None) -> None:
    assert join_prompt(piped, prompt) == expected


@pytest.mark.parametrize("command", ["chat", "serve", "tts", "transcribe", "score", "tui"])
def test_help_shows_switches_without_a_value(command: str) -> None:
    """A switch is shown bare (`--json`), not `--json <bool>`, which reads as taking a value."""
    result = invoke(command, "--help", env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "<bool>" not in result.stdout
    assert "--help" in result.stdout


# ------------------------------------------------------------------ REPL commands
def repl() -> Repl:
    options = TurnOptions(SamplingParams(), 1024)
    return Repl(FakeLoaded(), ChatHistory(system="Be brief."), options)  # type: ignore[arg-type]


def test_set_changes_the_next_answers_sampling_within_the_settings_bounds(capsys) -> None:
    r = repl()
    assert r.command("/set temp 0.2") and r.command("/set top_k 7") and r.command("/set n 64")
    assert (r.options.sampling.temperature, r.options.sampling.top_k) == (0.2, 7)
    assert r.options.max_tokens == 64
    r.command("/set temperature 9")  # the server's bound: refused, nothing changed
    assert r.options.sampling.temperature == 0.2
    assert "temperature must be between 0.0 and 2.0" in capsys.readouterr().err
    r.command("/set")
    assert "temperature = 0.2" in capsys.readouterr().out
    r.command("/set colour blue")
    assert "Usage: /set NAME VALUE" in capsys.readouterr().out


def test_save_writes_the_conversation_whole(tmp_path: Path, capsys) -> None:
    r = repl()
    r.history.add("Hi", "Hello.")
    target = tmp_path / "chat.json"
    r.command(f"/save {target}")
    saved = json.loads(target.read_text())
    assert saved == {
        "model": "fake-model",
        "system": "Be brief.",
        "messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello."},
        ],
    }
    r.command(f"/save {tmp_path / 'missing' / 'dir' / 'x.json'}")  # made, as a file save does
    r.command(f"/save {tmp_path}")  # a directory: an error line, no traceback, nothing lost
    assert "could not write" in capsys.readouterr().err
    assert target.exists()
