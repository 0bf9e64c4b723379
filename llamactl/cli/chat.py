"""`llamactl chat`: an interactive REPL, one-shot answers and prompts piped on stdin.

Three front doors, one path: each question becomes a `ChatRequest`, its stream is drawn by a
view (rich Markdown at a terminal, plain text in a pipe) or collected for `--json`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import stat
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text

from llamactl import (
    EXIT_INTERRUPTED,
    ContentDelta,
    Done,
    InvalidRequestError,
    LlamactlError,
    ReasoningDelta,
    RepetitionGuard,
    SamplingParams,
)
from llamactl.cli._chat_session import (
    ChatHistory,
    last_session_path,
    read_session,
    write_session,
)
from llamactl.cli._output import (
    AnswerView,
    NullView,
    PlainView,
    RichView,
    color_enabled,
    is_tty,
    print_error,
    print_note,
    stderr_console,
    stdout_console,
    usage_error,
)
from llamactl.cli._settings_options import SettingsCommand, settings_options
from llamactl.config import Settings, load_settings
from llamactl.config.fields import CHAT
from llamactl.config.interactive import INTERACTIVE, interactive_settings
from llamactl.engine_settings import check_rpc, gpu_note, sampling_defaults

if TYPE_CHECKING:
    from llamactl import ChatStream
    from llamactl.cli._engine import LoadedChat


HELP = """Chat with a local model: interactively, one question at a time, or from a pipe.

With no PROMPT at a terminal, starts an interactive chat that remembers the conversation.
With a PROMPT, or text piped on stdin, answers once and exits (piped text comes first,
then PROMPT). Answers stream as they are written and are shown as Markdown once complete;
in a pipe, or with NO_COLOR set, output is plain text.

Defaults for reading, not for programs (`serve` keeps llama-server's): an answer stops after
{max_tokens} tokens (--max-tokens -1: no limit), repetition is penalised (--repeat-penalty
{repeat_penalty:g}, --dry-multiplier {dry_multiplier:g}; 1 and 0 turn them off), and an answer
caught repeating itself is stopped with a note, [stopped: repeating].
""".format(**dataclasses.asdict(INTERACTIVE))

EPILOG = """\b
Examples:
  llamactl chat                                    # interactive
  llamactl chat "Name three primes" --temp 0 -n 64 # reproducible
  cat notes.md | llamactl chat "Summarise this"    # the pipe, then the prompt
  llamactl chat "Hi" --json | jq .text             # for scripts

In the chat: /help, /system TEXT, /set NAME VALUE, /save FILE, /load MODEL, /reset, /exit.
Ctrl-C stops an answer; Ctrl-D, or Ctrl-C twice at the prompt, leaves. --continue picks up
the last chat.
"""

_OUTPUT = "Output"


def register(app: typer.Typer) -> None:
    app.command("chat", help=HELP, epilog=EPILOG, cls=SettingsCommand)(chat_command)


@settings_options(CHAT)
def chat_command(
    overrides: dict[str, Any],
    prompt: Annotated[
        str | None,
        typer.Argument(
            help="The question. Omit it for an interactive chat.",
            metavar="PROMPT",
            show_default=False,
        ),
    ] = None,
    show_timings: Annotated[
        bool,
        typer.Option(
            "--show-timings",
            help="Print prompt and generation speed after answers.",
            rich_help_panel=_OUTPUT,
        ),
    ] = False,
    hide_reasoning: Annotated[
        bool,
        typer.Option(
            "--hide-reasoning", help="Do not show the model's thinking.", rich_help_panel=_OUTPUT
        ),
    ] = False,
    json_output: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print one JSON object with the answer, usage and timings.",
            rich_help_panel=_OUTPUT,
        ),
    ] = False,
    resume: Annotated[
        bool,
        typer.Option(
            "--continue",
            help="Go on with the last chat: its messages and system prompt (--system replaces "
            "it), with PROMPT or interactively.",
        ),
    ] = False,
) -> None:
    settings = interactive_settings(load_settings(overrides))
    check_rpc(settings)
    print_note(gpu_note(settings))
    question = join_prompt(read_piped_stdin(), prompt)
    if question is None:
        if not is_tty(sys.stdin):
            usage_error(
                "no prompt: pass one as an argument or pipe it on stdin "
                "(the interactive chat needs a terminal)"
            )
        if json_output:
            usage_error("--json needs a prompt (as an argument or on stdin)")

    from llamactl.cli._engine import load_chat

    options = TurnOptions.from_settings(settings, show_timings, hide_reasoning)
    history = ChatHistory(system=settings.system)
    if resume:
        history = continued_history(overrides.get("system"))
    try:
        with load_chat(settings) as loaded:
            if not json_output:
                hint_embedded_model(loaded.source)
            if question is None:
                Repl(loaded, history, options, settings).run()
                return
            if json_output:
                code = answer_json(loaded, history, question, options)
            else:
                answer = ask(loaded, history, question, options, make_view(options))
                code = EXIT_INTERRUPTED if answer.interrupted else 0
            remember(loaded.name, history)
    except KeyboardInterrupt:  # while loading, or a second Ctrl-C while stopping
        raise typer.Exit(EXIT_INTERRUPTED) from None
    if code:
        raise typer.Exit(code)


def continued_history(system: str | None) -> ChatHistory:
    """The last chat's conversation (`--continue`); a --system given now replaces its own."""
    path = last_session_path()
    if not path.exists():
        raise InvalidRequestError(f"no chat to continue yet (none saved at {path})")
    _, history = read_session(path)
    if system is not None:
        history.system = system
    if is_tty(sys.stderr):
        print_note(f"Continuing the last chat ({len(history.turns) // 2} turns).")
    return history


def remember(model: str, history: ChatHistory) -> None:
    """Leave the conversation for `--continue`; a state folder that cannot be written only
    costs that (the chat itself went fine)."""
    if not history.turns:
        return
    with contextlib.suppress(OSError):
        write_session(last_session_path(), model, history)


EMBEDDED_HINT = (
    "Answering with the embedded SmolLM2-135M, a small demo model. For real answers: "
    "`llamactl pull OWNER/REPO:QUANT` (a GGUF on Hugging Face), then `-m NAME` "
    "(`llamactl models` lists them)."
)


def hint_embedded_model(source: str) -> None:
    """One dim line, the first time a person chats with the embedded model, saying what it
    is and how to get a real one; never in a pipe, never twice (a marker in the state dir)."""
    if source != "embedded" or not is_tty(sys.stderr):
        return
    from llamactl import state_dir

    marker = state_dir() / "embedded-model-hint-shown"
    if marker.exists():
        return
    print_note(EMBEDDED_HINT)
    with contextlib.suppress(OSError):  # a read-only home shows the hint again next time
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()


# ------------------------------------------------------------------ input
def read_piped_stdin() -> str | None:
    """The text piped on stdin, or None when stdin is a terminal or carries nothing.

    /dev/null and sockets count as nothing: reading them could block (or say nothing) in
    daemons and CI jobs that were never meant to feed us a prompt.
    """
    stdin = sys.stdin
    if stdin is None or is_tty(stdin):
        return None
    try:
        mode = os.fstat(stdin.fileno()).st_mode
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        mode = None  # an in-memory stream (tests): read it
    if mode is not None and not (stat.S_ISFIFO(mode) or stat.S_ISREG(mode)):
        return None
    return stdin.read()


def join_prompt(piped: str | None, prompt: str | None) -> str | None:
    """Piped text first, then the prompt (`cat file | llamactl chat "summarise"`)."""
    piped = piped.strip() if piped else ""
    if piped and prompt:
        return f"{piped}\n\n{prompt}"
    return piped or prompt or None


# ------------------------------------------------------------ history
@dataclass(frozen=True)
class TurnOptions:
    sampling: SamplingParams
    max_tokens: int | None
    show_timings: bool = False
    show_reasoning: bool = True
    loop_guard: bool = True  # stop an answer caught in a repetition (`[stopped: repeating]`)

    @classmethod
    def from_settings(cls, s: Settings, show_timings: bool, hide_reasoning: bool) -> TurnOptions:
        return cls(sampling_defaults(s), s.max_tokens, show_timings, not hide_reasoning)


@dataclass
class Answer:
    content: str = ""
    reasoning: str = ""
    done: Done | None = None
    interrupted: bool = False
    repeating: bool = False  # the loop guard stopped it


# ---------------------------------------------------------------- one turn
def make_view(options: TurnOptions) -> AnswerView:
    if is_tty(sys.stdout):
        return RichView(stdout_console(), options.show_reasoning)
    return PlainView(sys.stdout, sys.stderr, options.show_reasoning)


def ask(
    loaded: LoadedChat,
    history: ChatHistory,
    question: str,
    options: TurnOptions,
    view: AnswerView,
) -> Answer:
    """One turn of the conversation, drawn by `view`.

    A complete answer joins the conversation; an interrupted or looping one does not, so the
    next question is not asked in the shadow of half a sentence (or of the loop).
    """
    answer = stream_answer(loaded, history.messages_for(question), options, view)
    if not (answer.interrupted or answer.repeating):
        history.add(question, answer.content.strip())
    if options.show_timings and answer.done is not None:
        print_timings(answer.done)
    return answer


def stream_answer(
    loaded: LoadedChat, messages: list[dict[str, str]], options: TurnOptions, view: AnswerView
) -> Answer:
    """Run one request into `view`; Ctrl-C stops it and the partial answer is returned, and
    so does the loop guard when the reasoning or the answer starts repeating itself."""
    answer = Answer()
    stream: ChatStream | None = None
    guards = (RepetitionGuard(), RepetitionGuard())  # reasoning, content
    view.start()
    try:
        try:
            stream = start_stream(loaded, messages, options)
            for event in stream:
                looping = False
                if isinstance(event, ReasoningDelta):
                    answer.reasoning += event.text
                    view.reasoning(event.text)
                    looping = guards[0].feed(event.text)
                elif isinstance(event, ContentDelta):
                    answer.content += event.text
                    view.content(event.text)
                    looping = guards[1].feed(event.text)
                elif isinstance(event, Done):  # the chat command offers no tools
                    answer.done = event
                if looping and options.loop_guard:
                    answer.repeating = True
                    answer.done = stop_stream(stream)
                    break
        except KeyboardInterrupt:
            answer.interrupted = True
            if stream is not None:
                answer.done = stop_stream(stream)
    finally:
        view.close(answer.content, answer.reasoning, answer.interrupted, answer.repeating)
    return answer


def start_stream(
    loaded: LoadedChat, messages: list[dict[str, str]], options: TurnOptions
) -> ChatStream:
    from llamactl import ChatRequest

    request = ChatRequest(
        messages=list(messages), sampling=options.sampling, max_tokens=options.max_tokens
    )
    return loaded.chat.start(request)


def stop_stream(stream: ChatStream) -> Done | None:
    """Cancel and wait for the engine to let go of the slot (further Ctrl-Cs are ignored:
    this takes one decode step)."""
    stream.cancel()
    done: Done | None = None
    while True:
        try:
            for event in stream:
                if isinstance(event, Done):
                    done = event
            return done
        except KeyboardInterrupt:
            continue


def print_timings(done: Done) -> None:
    t = done.timings
    cached = f", {t.cache_n} cached" if t.cache_n else ""
    line = (
        f"prompt: {t.prompt_n} tokens{cached}, {t.prompt_per_second:.1f} tokens/s · "
        f"generation: {t.predicted_n} tokens, {t.predicted_per_second:.1f} tokens/s"
    )
    stderr_console().print(Text(line, style="dim"), soft_wrap=True)


def answer_json(
    loaded: LoadedChat, history: ChatHistory, question: str, options: TurnOptions
) -> int:
    """Collect the whole answer and print it as one JSON object on stdout."""
    messages = history.messages_for(question)
    answer = stream_answer(loaded, messages, options, NullView())
    if not (answer.interrupted or answer.repeating):
        history.add(question, answer.content.strip())
    sys.stdout.write(json.dumps(answer_dict(answer, loaded.name), ensure_ascii=False) + "\n")
    return EXIT_INTERRUPTED if answer.interrupted else 0


def answer_dict(answer: Answer, model_name: str) -> dict[str, Any]:
    done = answer.done
    usage = done.usage if done else None
    return {
        "text": answer.content.strip(),
        "reasoning": answer.reasoning.strip(),
        "finish_reason": "repeating"
        if answer.repeating
        else (done.finish_reason if done else "cancelled"),
        "usage": {
            "prompt_tokens": usage.prompt_tokens if usage else 0,
            "completion_tokens": usage.completion_tokens if usage else 0,
            "total_tokens": usage.total_tokens if usage else 0,
            "cached_tokens": usage.cached_tokens if usage else 0,
        },
        "timings": done.timings.as_dict() if done else {},
        "model": model_name,
    }


# -------------------------------------------------------------------- REPL
REPL_HELP = """\
/help            show this help
/system TEXT     set the system prompt (without TEXT: show it)
/set NAME VALUE  change a sampling setting: temperature (temp), top_p, top_k, min_p,
                 seed, max_tokens (n), repeat_penalty, presence_penalty,
                 frequency_penalty (without NAME: show them)
/save FILE       write the conversation to FILE as JSON (model, system, messages)
/load MODEL      go on with another model (a GGUF path or a name under the models folder)
/reset           forget the conversation (the system prompt stays)
/exit            leave (also /quit, Ctrl-D, or Ctrl-C twice at the prompt)
\"\"\"              start or end a message of several lines
Ctrl-C           stop the answer being written"""


_SAMPLING_SETTINGS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "repeat_penalty",
    "presence_penalty",
    "frequency_penalty",
)
_SET_ALIASES = {"temp": "temperature", "n": "max_tokens"}


class Repl:
    """The interactive loop: read a line, run a slash command or ask the model."""

    def __init__(
        self,
        loaded: LoadedChat,
        history: ChatHistory,
        options: TurnOptions,
        settings: Settings | None = None,
    ):
        self.loaded = loaded
        self.history = history
        self.options = options
        self.settings = settings  # what /load starts another model with
        self.console = stdout_console()
        self._colour = color_enabled(sys.stdout)

    def run(self) -> None:
        save_history = _enable_line_editing()
        self.note(f"Chatting with {self.loaded.name}. Type /help for commands, Ctrl-D to leave.")
        armed = False  # a Ctrl-C at the prompt arms exit; a second one leaves
        try:
            while True:
                try:
                    text = self.read_message()
                except EOFError:
                    self.console.print()
                    return
                except KeyboardInterrupt:
                    if armed:
                        self.console.print()
                        return
                    armed = True
                    try:
                        self.console.print()
                        self.note("(Ctrl-C again or Ctrl-D to leave)")
                    except KeyboardInterrupt:  # the second Ctrl-C came while we printed
                        return
                    continue
                armed = False
                if not text.strip():
                    continue
                if not text.startswith("/"):
                    self.turn(text)
                elif not self.command(text):
                    return
        finally:
            save_history()

    def prompt(self, continuation: bool = False) -> str:
        mark = "... " if continuation else "> "
        if not self._colour:
            return mark
        # \001 and \002 tell readline the escape codes take no room on screen
        return f"\001\033[1;32m\002{mark}\001\033[0m\002"

    def read_message(self) -> str:
        """One line, or several between lines of triple quotes."""
        line = input(self.prompt())
        if not line.strip().startswith('"""'):
            return line
        first = line.strip()[3:]
        if first.endswith('"""'):
            return first[:-3]
        lines = [first] if first else []
        while True:
            line = input(self.prompt(continuation=True))
            if line.rstrip().endswith('"""'):
                lines.append(line.rstrip()[:-3])
                return "\n".join(lines)
            lines.append(line)

    def command(self, text: str) -> bool:
        """Run a slash command; False means leave the REPL."""
        name, _, arg = text.strip().partition(" ")
        arg = arg.strip()
        if name in ("/exit", "/quit"):
            return False
        if name == "/help":
            self.console.print(Text(REPL_HELP), soft_wrap=True)
        elif name == "/reset":
            self.history.reset()
            self.note("Conversation cleared.")
        elif name == "/set":
            self.set(arg)
        elif name == "/save":
            self.save(arg)
        elif name == "/load":
            self.load(arg)
        elif name == "/system":
            if arg:
                self.history.system = arg
                self.note("System prompt set.")
            elif self.history.system:
                self.note(f"System prompt: {self.history.system}")
            else:
                self.note("No system prompt (the model's template may add its own).")
        else:
            self.note(f"Unknown command {name}; type /help for the list.")
        return True

    def set(self, arg: str) -> None:
        """`/set NAME VALUE`: a sampling setting for the next answers, checked by the settings'
        own bounds; `/set` alone lists them."""
        s, limit = self.options.sampling, self.options.max_tokens
        if not arg:
            shown = [f"{name} = {getattr(s, name)}" for name in _SAMPLING_SETTINGS]
            shown.append(f"max_tokens = {'none' if limit is None else limit}")
            self.note(", ".join(shown))
            return
        name, _, value = arg.partition(" ")
        name = _SET_ALIASES.get(name, name)
        if name not in (*_SAMPLING_SETTINGS, "max_tokens") or not value.strip():
            self.note("Usage: /set NAME VALUE (/set alone lists the names)")
            return
        try:
            checked = getattr(load_settings({name: value.strip()}), name)
        except LlamactlError as e:
            print_error(str(e))
            return
        if name == "max_tokens":
            self.options = dataclasses.replace(self.options, max_tokens=checked)
        else:
            sampling = dataclasses.replace(s, **{name: checked})
            self.options = dataclasses.replace(self.options, sampling=sampling)
        self.note(f"{name} = {checked}")

    def save(self, arg: str) -> None:
        """`/save FILE`: the conversation as JSON, written whole or not at all."""
        if not arg:
            self.note("Usage: /save FILE")
            return
        path = Path(arg).expanduser()
        try:
            write_session(path, self.loaded.name, self.history)
        except OSError as e:
            print_error(f"could not write {path}: {e.strerror or e}")
            return
        self.note(f"Saved {len(self.history.turns) // 2} turns to {path}.")

    def load(self, arg: str) -> None:
        """`/load MODEL`: the conversation goes on with another model (a path, a name under
        the models folder, an alias). The current one stays if the new one fails to load."""
        if not arg or self.settings is None:
            self.note("Usage: /load MODEL (a GGUF path or a name `llamactl models` lists)")
            return
        from llamactl.cli._engine import load_chat

        settings = dataclasses.replace(self.settings, model=arg)
        try:
            loaded = load_chat(settings)
        except LlamactlError as e:
            print_error(str(e))
            self.note(f"Still chatting with {self.loaded.name}.")
            return
        except KeyboardInterrupt:
            self.note(f"Not loaded; still chatting with {self.loaded.name}.")
            return
        previous, self.loaded, self.settings = self.loaded, loaded, settings
        previous.close()
        turns = len(self.history.turns) // 2
        self.note(f"Chatting with {loaded.name}" + (f" ({turns} turns so far)." if turns else "."))

    def turn(self, question: str) -> None:
        try:
            ask(self.loaded, self.history, question, self.options, make_view(self.options))
        except LlamactlError as e:
            print_error(str(e))
            if self.history.turns:
                self.note("Use /reset to start a fresh conversation.")
        remember(self.loaded.name, self.history)
        self.console.print()

    def note(self, message: str) -> None:
        self.console.print(Text(message, style="dim"), soft_wrap=True)


def _enable_line_editing() -> Callable[[], None]:
    """Arrow keys and history for input(); returns a function that saves the history."""
    try:
        import readline
    except ImportError:  # pragma: no cover - Windows without pyreadline
        return lambda: None
    from llamactl import state_dir

    history = state_dir() / "chat_history"
    with contextlib.suppress(OSError):
        readline.read_history_file(history)
    readline.set_history_length(1000)

    def save() -> None:
        try:
            history.parent.mkdir(parents=True, exist_ok=True)
            readline.write_history_file(history)
        except OSError:
            pass

    return save
