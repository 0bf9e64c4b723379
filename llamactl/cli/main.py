"""The `llamactl` command: the Typer app, global flags and error handling.

Commands live one per module and register themselves here. This module imports nothing heavy
(no llama.cpp), so `--help`, `--version` and shell completion stay instant.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup, TyperOption

from llamactl import EXIT_FAILURE, LlamactlError, installed_version
from llamactl.cli import (
    chat,
    convert,
    models_cmd,
    ps,
    pull,
    quantize,
    score,
    serve,
    transcribe,
    tts,
    tui,
)
from llamactl.cli._output import print_error

if TYPE_CHECKING:  # typer vendors click; a group is invoked with click's Context (typer's base)
    from typer._click import Context as ClickContext

DEBUG_ENV = "LLAMACTL_DEBUG"


def _switches_show_no_value() -> None:
    """`--help` lists a switch (`--json`, `--kv-unified/--no-kv-unified`) without `<bool>`:
    the type column reads as a value to pass, and `chat --json true` then sent "true" as the
    prompt. Typer prints a type for every option; a flag takes none."""
    shown = TyperOption.display_type_rich

    def display_type_rich(self: TyperOption, ctx: Any) -> str | None:
        return None if self.is_flag else shown(self, ctx)

    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


_switches_show_no_value()


class LlamactlGroup(TyperGroup):
    """Turns errors meant for users into one red line and the error's `exit_code` (1; 2 for a
    `UsageError`).

    Done at the group (not in `run`) so CliRunner tests see exactly what a user sees.
    click's own usage errors keep click's handling (exit code 2).
    """

    def invoke(self, ctx: ClickContext) -> Any:
        try:
            return super().invoke(ctx)
        except (typer.TyperException, typer.Exit, typer.Abort):
            raise  # usage errors (exit 2), --help, explicit exits
        except BrokenPipeError:
            raise  # handled in run(): the reader went away, nothing to tell anyone
        except LlamactlError as e:
            print_error(str(e))
            raise typer.Exit(e.exit_code) from None
        except Exception as e:
            if os.environ.get(DEBUG_ENV, "") not in ("", "0"):
                raise
            print_error(
                f"unexpected {type(e).__name__}: {e} "
                f"(set {DEBUG_ENV}=1 to see the traceback; please report it)"
            )
            raise typer.Exit(EXIT_FAILURE) from None


app = typer.Typer(
    name="llamactl",
    cls=LlamactlGroup,
    epilog="Run **llamactl COMMAND --help** for a command's options and examples.",
    no_args_is_help=True,
    add_completion=False,  # static scripts live in completions/ (see docs/cli.md)
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
    context_settings={"help_option_names": ["-h", "--help", "--usage"]},
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"llamactl {installed_version()}")
        raise typer.Exit()


@app.callback()
def main(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version",
            "-V",
            help="Show the version and exit.",
            callback=_print_version,
            is_eager=True,
        ),
    ] = False,
) -> None:
    """Run local llama.cpp models from the terminal: chat, serve, talk, transcribe, speak, score.

    Settings come from flags, then LLAMACTL_* environment variables, then
    ~/.config/llamactl/config.toml. With no --model, the small embedded SmolLM2 is used.
    """


chat.register(app)
convert.register(app)
models_cmd.register(app)
serve.register(app)
ps.register(app)
pull.register(app)
quantize.register(app)
score.register(app)
transcribe.register(app)
tts.register(app)
tui.register(app)


def run() -> None:
    """Console-script entry point."""
    try:
        app(prog_name="llamactl")
    except BrokenPipeError:
        # `llamactl chat ... | head -1`: the reader left; exit quietly like other Unix tools.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(EXIT_FAILURE)
