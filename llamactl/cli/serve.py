"""`llamactl serve`: the OpenAI- and Anthropic-compatible HTTP server."""

from __future__ import annotations

import signal
import socket
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import typer

from llamactl import ConfigError, ModelLoadError
from llamactl.cli._output import print_note, stderr_console
from llamactl.cli._settings_options import SettingsCommand, settings_options
from llamactl.config import load_settings
from llamactl.config.fields import ROUTER_PANEL, SERVE, SERVER_PANEL
from llamactl.engine_settings import (
    chat_template,
    chat_template_kwargs,
    check_rpc,
    default_grammar,
    gpu_note,
)

LOG_LEVELS = ("debug", "info", "warning", "error")

EPILOG = """\b
Examples:
  llamactl serve                   # the embedded model on 127.0.0.1:8080
  llamactl serve -m ~/models/qwen3-4b.gguf --parallel 8 --api-key s3cret
  curl localhost:8080/v1/chat/completions \\
    -d '{"messages":[{"role":"user","content":"Hi"}]}'

Every flag but --log-level is also an LLAMACTL_* environment variable and a config-file key
(--ctx-size is LLAMACTL_N_CTX / n_ctx). llama-server's command lines work unchanged
(docs/serve.md, Moving from llama-server).
"""


def register(app: typer.Typer) -> None:
    app.command("serve", epilog=EPILOG, cls=SettingsCommand)(serve_command)


@settings_options(SERVE)
def serve_command(
    overrides: dict[str, Any],
    models_dir: Annotated[
        Path | None,
        typer.Option(
            "--models-dir",
            help="Router mode: serve every GGUF file in DIR, each loaded on demand.",
            metavar="DIR",
            file_okay=False,
            rich_help_panel=ROUTER_PANEL,
        ),
    ] = None,
    log_level: Annotated[
        str,
        typer.Option(
            "--log-level", help="debug, info, warning or error.", rich_help_panel=SERVER_PANEL
        ),
    ] = "info",
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose",
            "-v",
            help="Log everything: --log-level debug (llama-server's -v).",
            rich_help_panel=SERVER_PANEL,
        ),
    ] = False,
    log_file: Annotated[
        Path | None,
        typer.Option(
            "--log-file",
            help="Append the log to this file too (llama-server's --log-file).",
            dir_okay=False,
            rich_help_panel=SERVER_PANEL,
        ),
    ] = None,
    log_format: Annotated[
        str,
        typer.Option(
            "--log-format",
            help="text, or json: one JSON object per line (llama-server's --log-jsonl).",
            rich_help_panel=SERVER_PANEL,
        ),
    ] = "text",
    mmproj: Annotated[
        Path | None,
        typer.Option(
            "--mmproj",
            help="The model's multimodal projector: images (and audio) in chat, or a decision"
            " model's (default for those: mmproj-MODEL-FILE beside it).",
            show_default=False,
        ),
    ] = None,
    no_mmproj: Annotated[
        bool,
        typer.Option(
            "--no-mmproj",
            help="Serve without a projector, even one given or found beside the model.",
        ),
    ] = False,
    mmproj_offload: Annotated[
        bool,
        typer.Option(
            "--mmproj-offload/--no-mmproj-offload",
            help="Accepted for llama-server command lines: the projector runs on the CPU, as"
            " the model does.",
            hidden=True,
        ),
    ] = True,
    listen_fd: Annotated[
        int | None,
        typer.Option(
            "--listen-fd",
            help="A router's child only: serve on this inherited listening socket, bound by"
            " the router, and prove the API key to it (docs/router.md).",
            hidden=True,
        ),
    ] = None,
) -> None:
    """Serve the model over HTTP: OpenAI chat completions, completions, Responses and the
    Realtime websocket, Anthropic Messages, /tts and /v1/systemone, batched across --parallel
    slots; with --models-dir or --models-preset, a router over many models."""
    from llamactl.models import resolve_model
    from llamactl.server.app import create_app

    del mmproj_offload  # CPU only: there is nothing to offload

    if log_level.lower() not in LOG_LEVELS:  # uvicorn would fail later with a ValueError
        raise typer.BadParameter(
            f"expected one of {', '.join(LOG_LEVELS)}", param_hint="--log-level"
        )
    log_level = "debug" if verbose else log_level.lower()
    if log_format.lower() not in ("text", "json"):
        raise typer.BadParameter("expected text or json", param_hint="--log-format")
    logs = LogOptions(log_level, log_file, json_lines=log_format.lower() == "json")
    if log_file is not None:
        _check_writable(log_file)
    settings = load_settings({**overrides, "models_dir": models_dir})
    check_rpc(settings)
    print_note(gpu_note(settings))
    if models_dir is not None or settings.models_preset is not None:
        if listen_fd is not None:
            raise typer.BadParameter("a router's child serves one model", param_hint="--listen-fd")
        _serve_router(settings, models_dir is not None, logs)
        return
    from llamactl import InvalidRequestError, parse_spec_types

    try:
        parse_spec_types(settings.spec_type)
    except InvalidRequestError as e:
        raise typer.BadParameter(str(e), param_hint="--spec-type") from None
    if settings.slot_save_path is not None and not settings.slot_save_path.is_dir():
        # llama-server exits on it too: a typo would otherwise surface at the first save
        raise typer.BadParameter(
            f"not a directory: {settings.slot_save_path}", param_hint="--slot-save-path"
        )
    resolved = resolve_model(settings)
    _check_lora(settings, resolved.path)  # llama-server exits on a bad adapter too
    keys = settings.resolved_api_keys()  # a missing key file is an error now, not later
    if listen_fd is not None and not keys:
        raise typer.BadParameter("a router's child needs its API key", param_hint="--listen-fd")
    child_of_router = _child_socket(listen_fd, keys)
    chat_template(settings)  # so is a missing template file (llama-server exits on both)
    chat_template_kwargs(settings)  # and kwargs that are not a JSON object
    default_grammar(settings)  # and a default grammar that cannot be read or used
    if settings.media_path is not None and not settings.media_path.is_dir():
        raise typer.BadParameter(
            f"not a directory: {settings.media_path}", param_hint="--media-path"
        )
    app = create_app(
        settings,
        model_path=resolved.path,
        mmproj=None if no_mmproj else mmproj,
        no_mmproj=no_mmproj,
    )
    console = stderr_console()
    console.print(
        f"[bold]llamactl serve[/]: {resolved.name} on "
        f"[cyan]{_urls(settings)}[/] "
        f"({settings.parallel} slots{', API keys required' if app.state.llamactl.api_keys else ''})"
    )
    _run(app, settings, logs, child_of_router=child_of_router)


def _child_socket(listen_fd: int | None, keys: list[str]) -> tuple[socket.socket, str] | None:
    """A router's child: the listening socket it inherited, and the key it proves it holds."""
    if listen_fd is None:
        return None
    from llamactl.server.router.listener import adopt_listener

    try:
        return adopt_listener(listen_fd), keys[0]
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--listen-fd") from None


@dataclass(frozen=True)
class LogOptions:
    level: str
    file: Path | None = None
    json_lines: bool = False


def _check_lora(settings, model_path: Path) -> None:
    """Every --lora / --lora-scaled file is a LoRA adapter GGUF for the model's architecture."""
    from llamactl import check_lora_adapter, read_gguf_info
    from llamactl.engine_settings import engine_values

    values = engine_values(settings, {"lora", "lora_scaled"})  # ConfigError: bad FNAME:SCALE
    paths = [*values["lora"], *(path for path, _ in values["lora_scaled"])]
    if paths:
        architecture = read_gguf_info(model_path).architecture
        for path in paths:
            check_lora_adapter(path, architecture)


def _check_writable(path: Path) -> None:
    """A log file that cannot be opened is an error now, not a traceback when logging starts."""
    try:
        with path.open("a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise ConfigError(f"log file {path}: {exc.strerror or exc}") from None


def _urls(settings) -> str:
    from llamactl.server.edge.listen import display_urls

    urls = display_urls(settings.host, settings.port)
    return ", ".join(url if url.startswith("unix:") else url + "/v1" for url in urls)


def _serve_router(settings, scan_dir: bool, logs: LogOptions) -> None:
    """Router mode: no model of its own; a child `llamactl serve` per model, on demand."""
    from llamactl.server.router import create_router_app

    app = create_router_app(settings, models_dir=settings.models_dir if scan_dir else None)
    state = app.state.llamactl
    stderr_console().print(
        f"[bold]llamactl serve[/] (router): {_count(len(state.manager.catalog), 'model')} on "
        f"[cyan]{_urls(settings)}[/] "
        f"(at most {settings.models_max or 'any number'} loaded"
        f"{', API keys required' if state.api_keys else ''})"
    )
    _run(app, settings, logs)


def _run(
    app, settings, logs: LogOptions, child_of_router: tuple[socket.socket, str] | None = None
) -> None:
    """`uvicorn.run`, with a graceful stop: the first SIGTERM/SIGINT stops taking requests and
    ends the queued ones, running generations get `--shutdown-grace` seconds to finish, then
    the rest end with a final error event (never a cut connection or a CancelledError
    traceback); a second signal ends them at once. The exit code is 0.

    `child_of_router` (a router's child): serve on the socket the router bound and answer
    its challenge with the key (server/router/proof.py), instead of binding an address."""
    import asyncio
    import contextlib
    import time

    import uvicorn

    from llamactl.server.edge.listen import bind_sockets, remove_socket_files
    from llamactl.server.edge.uvicorn_options import uvicorn_options
    from llamactl.server.request_log import uvicorn_log_config

    state = app.state.llamactl

    stop_generating = state.stop_generating  # every open stream gets an error event, then ends

    async def drain_then_stop() -> None:
        if settings.shutdown_grace <= 0 or not state.drain():
            stop_generating()
            return
        deadline = time.monotonic() + settings.shutdown_grace
        while state.busy_slots and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        stop_generating()

    draining: set[asyncio.Task] = set()  # holds the drain task until the process ends

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            first = not self.should_exit
            super().handle_exit(sig, frame)
            # on the loop, not in the signal handler: close() takes the engine lock
            with contextlib.suppress(RuntimeError):  # no loop yet: nothing is generating
                loop = asyncio.get_running_loop()
                if first:
                    loop.call_soon_threadsafe(
                        lambda: draining.add(loop.create_task(drain_then_stop()))
                    )
                else:
                    loop.call_soon_threadsafe(stop_generating)

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            await super().shutdown(sockets)
            # A second signal (`timeout` sends two at once) makes uvicorn skip the lifespan's
            # shutdown; the lifespan task is then cancelled at exit and logs a traceback. Its
            # shutdown is quick (the generations were stopped): run it anyway.
            if self.force_exit and self.started:
                with contextlib.suppress(Exception):
                    await self.lifespan.shutdown()

    options = uvicorn_options(
        settings,
        log_config=uvicorn_log_config(logs.level, log_file=logs.file, json_lines=logs.json_lines),
        log_level=logs.level,
        # connections are waited for while generations drain, then a little more
        timeout_graceful_shutdown=settings.shutdown_grace + 5,
    )
    # Bound here, before uvicorn starts the lifespan that loads the model: an address in use
    # stops serve (exit 3) before any loading; several addresses and UNIX sockets alike
    sockets = None if child_of_router is not None else bind_sockets(settings.host, settings.port)
    served = app
    if child_of_router is not None:
        from llamactl.server.router.proof import ChildProofApp

        listener, key = child_of_router
        sockets = [listener]
        served = ChildProofApp(app, key, listener.getsockname()[1])
    config = uvicorn.Config(served, **options)
    server = Server(config)
    if hasattr(state, "on_load_failure"):  # one model (a router's children fail on their own)
        state.on_load_failure = lambda _error: setattr(server, "should_exit", True)
    _exit_quietly_after_signals(server)
    try:
        server.run(sockets=sockets)  # a port in use or a failed startup exits with code 3
    finally:
        if sockets is not None:
            remove_socket_files(settings.host)
    if getattr(state, "load_error", None):
        raise ModelLoadError(f"could not load the model: {state.load_error}")


def _exit_quietly_after_signals(server: Any) -> None:
    """uvicorn shuts down gracefully on SIGINT/SIGTERM, then re-raises the signal to the handler
    it found: the default one kills the process (exit 143 for SIGTERM) or raises
    KeyboardInterrupt into a half-closed event loop. The shutdown is done by then, so the
    handlers it finds only ask the server to exit, and `serve` returns with exit code 0. A
    signal that comes before uvicorn has put its own handlers in place asks the same: the
    server stops as soon as it has started, instead of the signal being lost."""

    def stop(_sig: int, _frame: FrameType | None) -> None:
        server.should_exit = True

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stop)


def _count(n: int, noun: str) -> str:
    """`1 model`, `3 models`."""
    return f"{n} {noun}{'' if n == 1 else 's'}"
