"""The interactive chat in a real pseudo-terminal, typed at as a person would.

`pty.fork` gives the child a controlling terminal, so Ctrl-C (0x03) becomes a real SIGINT from
the line discipline and Ctrl-D a real end of input, exactly as at a desk.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not hasattr(pty, "fork"), reason="needs a POSIX pseudo-terminal"),
]

ANSI = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][0-9A-Za-z]|\x1b."
)
PROMPT = re.compile(r"(?m)^> ")
LOADING = re.compile(r"Loading model [^\n]*?…")
TIMEOUT = 150.0  # generous: a busy 2-core machine can be 50x slower than an idle one


class Terminal:
    """A child `python -m llamactl ...` on a pty, with expect-style reading."""

    def __init__(self, args: list[str], env: dict[str, str], rows: int = 40, cols: int = 100):
        pid, fd = pty.fork()
        if pid == 0:  # the child: size the terminal, then become llamactl
            try:
                # Ctrl-C must reach Python as at a desk, even when the test runner was started
                # with SIGINT ignored (an ignored signal stays ignored across exec)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
                os.execve(sys.executable, [sys.executable, "-m", "llamactl", *args], env)
            finally:
                os._exit(127)
        self.pid, self.fd = pid, fd
        self.raw = b""
        self.pos = 0  # expect() searches the cleaned text from here on
        self.status: int | None = None

    @property
    def text(self) -> str:
        return ANSI.sub("", self.raw.decode("utf-8", "replace")).replace("\r", "")

    def _read(self, timeout: float) -> bool:
        """Read what is available; False once the child has closed the terminal."""
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return True
        try:
            chunk = os.read(self.fd, 65536)
        except OSError:  # EIO: the child is gone
            return False
        self.raw += chunk
        return bool(chunk)

    def expect(self, pattern: str | re.Pattern[str], timeout: float = TIMEOUT) -> re.Match[str]:
        regex = re.compile(re.escape(pattern)) if isinstance(pattern, str) else pattern
        deadline = time.monotonic() + timeout
        while True:
            match = regex.search(self.text, self.pos)
            if match:
                self.pos = match.end()
                return match
            if time.monotonic() > deadline or not self._read(0.1):
                tail = self.text[self.pos :][-2000:]
                raise AssertionError(
                    f"did not see {regex.pattern!r}; after the last match:\n{tail}"
                )

    def expect_answer_text(self, timeout: float = TIMEOUT) -> None:
        """Wait until a digit shows up outside the loading status line."""
        deadline = time.monotonic() + timeout
        while not re.search(r"\d", LOADING.sub("", self.text[self.pos :])):
            if time.monotonic() > deadline or not self._read(0.1):
                raise AssertionError(f"no answer text; screen:\n{self.text[-2000:]}")

    def send(self, data: str) -> None:
        os.write(self.fd, data.encode())

    def line(self, text: str) -> None:
        """Type a line at the prompt and press Enter."""
        self.expect(PROMPT)
        self.send(text + "\r")
        self.expect(text)  # the terminal echoes it back

    def answer(self) -> str:
        """The text printed between the question just typed and the next prompt."""
        start = self.pos
        self.expect(PROMPT)
        self.pos -= 2  # leave the prompt for the next line()
        return self.text[start : self.pos]

    def wait(self, timeout: float = TIMEOUT) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._read(0.05)
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = os.waitstatus_to_exitcode(status)
                return self.status
        raise AssertionError(f"llamactl did not exit; screen:\n{self.text[-2000:]}")

    def close(self) -> None:
        if self.status is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        os.close(self.fd)


@pytest.fixture
def chat(isolated_dirs: object) -> Iterator:
    """Start `llamactl chat ARGS` on a fresh terminal; killed at the end if still running."""
    started: list[Terminal] = []

    def start(*args: str, **extra_env: str) -> Terminal:
        env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "COLUMNS", "LINES")}
        env.update(TERM="xterm-256color", **extra_env)
        term = Terminal(["chat", *args], env)
        started.append(term)
        term.expect("Chatting with SmolLM2")
        return term

    yield start
    for term in started:
        term.close()


def test_answers_commands_and_ctrl_d(chat) -> None:
    term = chat("--temperature", "0", "--max-tokens", "16")
    term.line("What is the capital of France?")
    assert term.answer().strip()

    term.line("/system You are a pirate.")
    term.expect("System prompt set.")
    term.line("/system")
    term.expect("System prompt: You are a pirate.")
    term.line("And of Italy?")  # asked with the system prompt and the history
    assert term.answer().strip()

    term.line("/reset")
    term.expect("Conversation cleared.")
    term.line("/help")
    term.expect("/system TEXT")
    term.line("/nope")
    term.expect("Unknown command /nope")

    term.expect(PROMPT)
    term.send("\x04")  # Ctrl-D
    assert term.wait() == 0


def test_ctrl_c_stops_the_answer_and_keeps_the_chat(chat) -> None:
    term = chat("--temperature", "0", "--max-tokens", "400")
    term.line("Count from 1 to 500, one number per line.")
    term.expect(re.compile(r"\d"))  # the answer has started streaming
    term.send("\x03")  # Ctrl-C
    term.expect("[interrupted]")

    term.line("Say hello.")
    assert term.answer().strip()  # up to and including the next prompt

    # readline prints the prompt before it has set the terminal up; a Ctrl-C in that instant
    # is lost (a person cannot type that fast), so give it a moment
    time.sleep(0.5)
    term.send("\x03")  # Ctrl-C at an empty prompt only warns
    term.expect("Ctrl-C again")
    time.sleep(0.5)  # the same readline start-up instant as above
    term.send("\x03")
    assert term.wait() == 0


def test_exit_command_and_history_file(chat, isolated_dirs) -> None:
    term = chat("--temperature", "0", "--max-tokens", "4")
    term.line("/exit")
    assert term.wait() == 0
    history = isolated_dirs.state_home / "llamactl" / "chat_history"
    assert "/exit" in history.read_text()


def hint_marker(dirs: Any) -> Path:
    """Where chat notes that the embedded model's first-run hint was shown."""
    return Path(dirs.state_home) / "llamactl" / "embedded-model-hint-shown"


@pytest.fixture
def terminal_env(isolated_dirs: Any) -> dict[str, str]:
    # the embedded model's first-run hint was shown (its own test removes the marker)
    hint_marker(isolated_dirs).parent.mkdir(parents=True, exist_ok=True)
    hint_marker(isolated_dirs).touch()
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "COLUMNS", "LINES")}
    env["TERM"] = "xterm-256color"
    return env


def test_one_shot_at_a_terminal_renders_and_exits(terminal_env: dict[str, str]) -> None:
    term = Terminal(
        ["chat", "Say hello.", "--temp", "0", "-n", "8", "--show-timings"], terminal_env
    )
    try:
        assert term.wait() == 0
        term.expect("Loading model SmolLM2-135M-Instruct.Q4_1 (93.8 MiB)")
        assert re.search(r"\w", term.text.split("tokens/s")[0])
        term.expect("tokens/s")
        assert "\x1b[" in term.raw.decode()  # a terminal: rich styles and redraws
    finally:
        term.close()


def test_the_first_chat_with_the_embedded_model_says_what_it_is_once(
    terminal_env: dict[str, str], isolated_dirs: Any
) -> None:
    hint_marker(isolated_dirs).unlink()
    hints = []
    for _ in range(2):
        term = Terminal(["chat", "Hi", "--temp", "0", "-n", "2"], terminal_env)
        try:
            assert term.wait() == 0
            hints.append("small demo model" in term.text and "llamactl pull" in term.text)
        finally:
            term.close()
    assert hints == [True, False]


def test_ctrl_c_stops_a_one_shot_answer(terminal_env: dict[str, str]) -> None:
    question = "Count from 1 to 500, one number per line."
    term = Terminal(["chat", question, "--temp", "0", "-n", "400"], terminal_env)
    try:
        term.expect_answer_text()
        term.send("\x03")
        assert term.wait() == 130
        term.expect("[interrupted]")
        assert "Traceback" not in term.text
    finally:
        term.close()


def test_no_color_is_honoured(terminal_env: dict[str, str]) -> None:
    term = Terminal(
        ["chat", "Say hello.", "--temp", "0", "-n", "8"], {**terminal_env, "NO_COLOR": "1"}
    )
    try:
        assert term.wait() == 0
        assert not re.search(r"\x1b\[[0-9;]*m", term.raw.decode("utf-8", "replace"))
    finally:
        term.close()


# ------------------------------------------- answers taller than the terminal
STORY = "Write a long story about a dragon and a knight."
SMALL = {"rows": 10, "cols": 80}


def scrollback(term: Terminal, rows: int, cols: int) -> list[str]:
    """What a person can scroll back through: the lines pushed off the top, then the screen,
    as a VT100 draws the bytes the child wrote."""
    import pyte

    screen = pyte.HistoryScreen(cols, rows, history=100_000)
    pyte.ByteStream(screen).feed(term.raw)
    above = ["".join(line[x].data for x in range(cols)).rstrip() for line in screen.history.top]
    return above + [line.rstrip() for line in screen.display]


def assert_printed_once(lines: list[str]) -> None:
    """The answer's first lines appear once each, whole or in part: no redraw of the live
    preview leaked into the scrollback (the story is far taller than the terminal)."""
    text = [line for line in lines if line.strip()]
    starts = [i for i, line in enumerate(text) if "Once upon a time".startswith(line[:16])]
    assert len(starts) == 1, "\n".join(lines)
    answer = text[starts[0] :]
    assert len(answer) > SMALL["rows"] + 5, "\n".join(lines)  # taller than the terminal
    # a leaked redraw of a line is that line whole or cut short: a prefix of it (two lines
    # of the story that merely begin alike are not)
    for line in answer[:5]:
        copies = sum(len(other) >= 16 and line.startswith(other) for other in text)
        assert copies == 1, "\n".join(lines)


# LINES and COLUMNS left over from a larger window (a resize) must not be believed
STALE_SIZE = {"LINES": "40", "COLUMNS": "120"}


@pytest.mark.parametrize("env", [{}, STALE_SIZE], ids=["size", "stale-LINES-COLUMNS"])
def test_a_tall_one_shot_answer_is_printed_once(terminal_env: dict[str, str], env) -> None:
    args = ["chat", STORY, "--temp", "0", "-n", "300"]
    term = Terminal(args, {**terminal_env, **env}, **SMALL)
    try:
        assert term.wait() == 0
        assert_printed_once(scrollback(term, **SMALL))
    finally:
        term.close()


def test_a_tall_repl_answer_is_printed_once(isolated_dirs: object) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "COLUMNS", "LINES")}
    term = Terminal(
        ["chat", "--temp", "0", "-n", "300"],
        {**env, "TERM": "xterm-256color", **STALE_SIZE},
        **SMALL,
    )
    try:
        term.expect("Chatting with SmolLM2")
        term.line(STORY)
        term.answer()
        term.send("\x04")
        assert term.wait() == 0
        assert_printed_once(scrollback(term, **SMALL))
    finally:
        term.close()
