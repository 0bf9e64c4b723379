"""`llamactl tui`: talk with a model in the terminal (Textual app in llamactl.tui)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from llamactl import LlamactlError
from llamactl.cli._devices import print_input_devices
from llamactl.cli._help import PlainHelpCommand
from llamactl.cli._output import stderr_console
from llamactl.cli._turns import EAGERNESS_HELP, TURN_HELP, Eagerness, TurnMode

HELP = """Talk with a model: speak or type, read and hear the answer, skip its reasoning.

A full-screen client of the /v1/realtime conversation API. With no --url it starts the server
in this process on a free port (the same server as `llamactl serve`) and stops it on exit.
"""

EPILOG = """\b
Examples:
  llamactl tui                          # local server, embedded models, mic
  llamactl tui -m ~/models/qwen3-4b.gguf --ptt  # push to talk (ctrl+t)
  llamactl tui --turn semantic --eagerness high # ends when you sound done
  llamactl tui --url http://127.0.0.1:8080 --api-key s3cret
  llamactl tui -m qwen3-4b --reasoning-budget 64  # think briefly, then speak
  llamactl tui --list-devices                   # input devices for --device

Keys: ctrl+t talk/mute, escape interrupt, ctrl+s skip reasoning, ctrl+r show reasoning,
f2 microphone, f3 cycles server VAD / semantic VAD / push to talk, ctrl+q quit. See docs/tui.md.
"""


def register(app: typer.Typer) -> None:
    app.command("tui", help=HELP, epilog=EPILOG, cls=PlainHelpCommand)(tui_command)


def tui_command(
    url: Annotated[
        str | None,
        typer.Option("--url", help="A running llamactl server; none: start one in-process."),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            "--model", "-m", help="Model for the local server (GGUF path, alias), or --url's."
        ),
    ] = None,
    api_key: Annotated[
        str | None, typer.Option("--api-key", help="API key for the server.")
    ] = None,
    device: Annotated[
        int | None, typer.Option("--device", help="Input device number (see --list-devices).")
    ] = None,
    ptt: Annotated[
        bool,
        typer.Option("--ptt", help="Push to talk (ctrl+t starts and sends): --turn manual."),
    ] = False,
    turn: Annotated[
        TurnMode,
        typer.Option(
            "--turn", help=TURN_HELP.format(manual="push to talk: ctrl+t starts and sends")
        ),
    ] = TurnMode.server,
    eagerness: Annotated[Eagerness, typer.Option("--eagerness", help=EAGERNESS_HELP)] = (
        Eagerness.auto
    ),
    audio_file: Annotated[
        Path | None,
        typer.Option(
            "--audio-file",
            help="Speak this audio file instead of the microphone (demos, tests).",
            exists=True,
            dir_okay=False,
        ),
    ] = None,
    reasoning_budget: Annotated[
        int | None,
        typer.Option(
            "--reasoning-budget",
            help="Thinking tokens per answer before the model is made to answer (-1: no bound;"
            " default: the server's). Keeps a thinking model's spoken answer from waiting.",
            min=-1,
            metavar="N",
        ),
    ] = None,
    echo_cancel: Annotated[
        bool,
        typer.Option(
            "--echo-cancel/--no-echo-cancel",
            help="Take the spoken answers out of what the microphone hears, so you can talk over"
            " them on loudspeakers (the mic bar shows AEC). Off: for headphones only.",
        ),
    ] = True,
    voice: Annotated[
        str | None,
        typer.Option(
            "--voice",
            help="The answers' voice: a Piper voice (en_US-joe-medium, or joe) sounds natural;"
            " an eSpeak NG name or OpenAI's (alloy...). `llamactl tts --list-voices` lists them.",
            metavar="NAME",
        ),
    ] = None,
    list_devices: Annotated[
        bool, typer.Option("--list-devices", help="List input devices and exit.")
    ] = False,
) -> None:
    """Run the TUI; the local server (if any) is stopped however the app ends."""
    if list_devices:
        print_input_devices()
        return
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise LlamactlError("llamactl tui needs a terminal (stdin and stdout must be a TTY)")
    try:
        from llamactl.tui.app import ChatApp
    except ImportError as exc:  # a broken install: textual is a dependency
        raise LlamactlError(
            f"the TUI needs the textual package: pip install textual ({exc})"
        ) from None

    source_factory = _source_factory(audio_file)
    server = None
    label = url
    if url is None:
        server, url = _start_local_server(model, api_key)
        label = f"local server {url}"
    try:
        app = ChatApp(
            url,
            api_key=api_key,
            model=model if server is None else None,
            device=device,
            turn="manual" if ptt else turn.value,
            eagerness=eagerness.value,
            server_label=label,
            reasoning_budget=reasoning_budget,
            source_factory=source_factory,
            echo_cancel=echo_cancel,
            voice=voice,
        )
        app.run()
    finally:
        if server is not None:
            server.stop()


def _source_factory(audio_file: Path | None):
    from llamactl.tui.audio import FileSource, MicSource

    if audio_file is None:
        return MicSource
    return lambda _device: FileSource(audio_file)


def _start_local_server(model: str | None, api_key: str | None):
    from llamactl.config import load_settings
    from llamactl.config.interactive import interactive_settings
    from llamactl.models import resolve_model
    from llamactl.tui.local_server import LocalServer, log_path

    settings = interactive_settings(
        load_settings({"model": model, "api_key": [api_key] if api_key else None})
    )
    resolved = resolve_model(settings)
    server = LocalServer(settings, model_path=resolved.path)
    console = stderr_console()
    with console.status(f"Starting a local server with {resolved.name} (log: {log_path()})…"):
        url = server.start()
    return server, url
