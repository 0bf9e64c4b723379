"""Console helpers shared by every command, and the views that draw a streamed answer.

Colour is a courtesy to people at a terminal: it is off whenever the stream is not a TTY or
NO_COLOR is set (https://no-color.org), so pipes, files and CI logs get plain text.
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Callable
from typing import IO, NoReturn, Protocol, TextIO

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.live import Live
from rich.markdown import Markdown
from rich.segment import Segment
from rich.spinner import Spinner
from rich.text import Text

from llamactl import REPEATING_NOTE, UsageError


def no_color_requested() -> bool:
    """NO_COLOR set to any non-empty value disables colour everywhere."""
    return os.environ.get("NO_COLOR", "") != ""


def is_tty(stream: TextIO) -> bool:
    """True when `stream` is an interactive terminal (false for CliRunner's buffers)."""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed or file-like without isatty
        return False


def color_enabled(stream: TextIO) -> bool:
    return is_tty(stream) and not no_color_requested()


def terminal_size(stream: IO[str]) -> os.terminal_size | None:
    """The size of the terminal `stream` writes to, asked of the terminal itself: LINES and
    COLUMNS go stale when a window is resized, and a live view drawn for a taller terminal
    than the real one scrolls its first lines into the scrollback, to be printed again."""
    try:
        size = os.get_terminal_size(stream.fileno())
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return None
    return size if size.lines > 0 and size.columns > 0 else None


def make_console(stream: TextIO) -> Console:
    """A rich Console bound to `stream` as it is now (tests swap sys.stdout per run)."""
    tty = is_tty(stream)
    size = terminal_size(stream) if tty else None
    return Console(
        file=stream,
        force_terminal=tty,
        # in a pipe, keep lines whole for grep and awk instead of wrapping at 80 columns
        width=size.columns if size else None if tty or os.environ.get("COLUMNS") else 1000,
        height=size.lines if size else None,
        no_color=not color_enabled(stream),
        color_system="auto" if color_enabled(stream) else None,
        highlight=False,
        emoji=False,
    )


def stdout_console() -> Console:
    return make_console(sys.stdout)


def stderr_console() -> Console:
    return make_console(sys.stderr)


def print_error(message: str) -> None:
    """One red line on stderr: what went wrong, never a traceback."""
    line = Text(f"Error: {message}", style="red")
    stderr_console().print(line, soft_wrap=True, markup=False)


def print_note(message: str | None) -> None:
    """One dim line on stderr (nothing for None): something worth knowing, not an error."""
    if message:
        stderr_console().print(Text(message, style="dim"), soft_wrap=True, markup=False)


def usage_error(message: str) -> NoReturn:
    """A command line the command cannot run: the group prints it and exits 2, as click does
    for its own usage errors."""
    raise UsageError(message)


def human_size(n_bytes: int) -> str:
    """Binary units with one decimal, as `ls -lh` users expect."""
    units = ("B", "KiB", "MiB", "GiB", "TiB")
    size, i = float(n_bytes), 0
    while size >= 1024 and i < len(units) - 1:
        size /= 1024
        i += 1
    return f"{int(size)} B" if i == 0 else f"{size:.1f} {units[i]}"


# ---------------------------------------------------------- answer views
class AnswerView(Protocol):
    """Draws one answer while it streams; `close` gets the whole answer and runs even when
    the stream failed or was interrupted (`repeating`: the loop guard stopped it)."""

    def start(self) -> None: ...
    def reasoning(self, text: str) -> None: ...
    def content(self, text: str) -> None: ...
    def close(
        self, content: str, reasoning: str, interrupted: bool, repeating: bool = False
    ) -> None: ...


class NullView:
    """Draws nothing: --json prints the collected answer at the end."""

    def start(self) -> None:
        pass

    def reasoning(self, text: str) -> None:
        pass

    def content(self, text: str) -> None:
        pass

    def close(
        self, content: str, reasoning: str, interrupted: bool, repeating: bool = False
    ) -> None:
        pass


class PlainView:
    """Text as it comes: the answer on stdout, the reasoning (if shown) on stderr, so a
    pipe receives only the answer."""

    def __init__(self, out: TextIO, err: TextIO, show_reasoning: bool) -> None:
        self.out, self.err, self.show_reasoning = out, err, show_reasoning
        self._started = False  # leading blank lines of the answer are dropped
        self._reasoned = False

    def start(self) -> None:
        pass

    def reasoning(self, text: str) -> None:
        if self.show_reasoning:
            self._reasoned = True
            self.err.write(text)
            self.err.flush()

    def content(self, text: str) -> None:
        if not self._started:
            text = text.lstrip()
            if not text:
                return
            self._started = True
        self.out.write(text)
        self.out.flush()

    def close(
        self, content: str, reasoning: str, interrupted: bool, repeating: bool = False
    ) -> None:
        if self._reasoned and not reasoning.endswith("\n"):
            self.err.write("\n")
        if self._started and not content.endswith("\n"):
            self.out.write("\n")
        self.out.flush()
        if interrupted:
            self.err.write("[interrupted]\n")
        if repeating:
            self.err.write(REPEATING_NOTE + "\n")
        self.err.flush()


class _Tail:
    """Renders only the last lines of something, so a live answer taller than the terminal
    shows its newest text instead of being cut at the bottom.

    The live region must stay shorter than the terminal: a line that scrolls off its top
    cannot be erased, and is in the scrollback twice once the answer is printed. So the
    size is asked of the terminal at each refresh (the window may have been resized)."""

    def __init__(self, build: Callable[[], RenderableType]) -> None:
        self.build = build

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        size = terminal_size(console.file)
        rows, width = console.height, options.max_width
        if size is not None:
            rows, width = min(rows, size.lines), min(width, size.columns)
        lines = console.render_lines(self.build(), options.update_width(width), pad=False)
        keep = max(1, rows - 1)
        for line in lines[-keep:]:
            yield from line
            yield Segment.line()


def whole_blocks(text: str) -> int:
    """How much of `text` is whole Markdown blocks: up to its last blank line outside a code
    fence (a block after it may still grow: a paragraph, a list, a fence not closed yet)."""
    pos = cut = 0
    in_fence = False
    for line in text.splitlines(keepends=True):
        if not line.endswith("\n"):
            break  # the line being written
        stripped = line.strip()
        if stripped.startswith(("```", "~~~")):
            in_fence = not in_fence
        pos += len(line)
        if not stripped and not in_fence:
            cut = pos
    return cut


class RichView:
    """A live preview while streaming, the answer printed as Markdown.

    Whole blocks (paragraphs, lists, closed code fences) are printed for good as soon as they
    end, above the live region, which keeps only the block being written: a long answer is in
    the terminal's scrollback from its first paragraph on, not only once it is complete."""

    def __init__(self, console: Console, show_reasoning: bool) -> None:
        self.console = console
        self.show_reasoning = show_reasoning
        self._reasoning = ""  # not printed yet
        self._content = ""
        self._printed = False  # a block is on screen: the next one starts after a blank line
        self._spinner = Spinner("dots", text=Text("Thinking…", style="dim"))
        self._live = Live(
            _Tail(self._preview),
            console=console,
            transient=True,
            refresh_per_second=12,
            redirect_stdout=False,
            redirect_stderr=False,
        )

    def start(self) -> None:
        self._live.start()

    def reasoning(self, text: str) -> None:
        if not self.show_reasoning:
            return
        pending = self._reasoning + text
        cut = whole_blocks(pending)
        if cut:
            self._print(self._reasoning_block(pending[:cut]))
        self._reasoning = pending[cut:]

    def content(self, text: str) -> None:
        if self._reasoning.strip():  # the answer began: the thinking is over
            self._print(self._reasoning_block(self._reasoning))
        self._reasoning = ""
        pending = self._content + text
        cut = whole_blocks(pending)
        if cut:
            self._print(self._answer_block(pending[:cut]))
        self._content = pending[cut:]

    @staticmethod
    def _reasoning_block(text: str) -> RenderableType | None:
        return Text(text.strip(), style="dim italic") if text.strip() else None

    @staticmethod
    def _answer_block(text: str) -> RenderableType | None:
        return Markdown(text.strip()) if text.strip() else None

    def _print(self, block: RenderableType | None) -> None:
        """`block` above the live region, for good (rich moves the live region below it)."""
        if block is None:
            return
        self.console.print(Group(Text(), block) if self._printed else block)
        self._printed = True

    def _parts(self, reasoning: str, content: str) -> list[RenderableType]:
        blocks = (self._reasoning_block(reasoning), self._answer_block(content))
        parts: list[RenderableType] = []
        for block in blocks:
            if block is not None:
                if parts or self._printed:
                    parts.append(Text())  # a blank line between blocks, as Markdown has
                parts.append(block)
        return parts

    def _preview(self) -> RenderableType:
        # read each once: the decode side changes them while the refresh thread renders
        parts = self._parts(self._reasoning, self._content)
        if parts:
            return Group(*parts)
        return Text() if self._printed else self._spinner

    def close(
        self, content: str, reasoning: str, interrupted: bool, repeating: bool = False
    ) -> None:
        """The rest of the answer (what was not printed block by block) and its notes."""
        self._live.stop()
        parts = self._parts(self._reasoning, self._content)
        if interrupted:
            parts.append(Text("[interrupted]", style="dim"))
        if repeating:
            parts.append(Text(REPEATING_NOTE, style="dim"))
        if parts:
            self.console.print(Group(*parts))
