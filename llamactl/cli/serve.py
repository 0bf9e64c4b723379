"""`llamactl serve`: the OpenAI- and Anthropic-compatible HTTP server."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Annotated

import typer

from llamactl.cli._output import stderr_console
from llamactl.config import load_settings

_SERVER = "Server"
_MODEL = "Model and engine"

EPILOG = """
Examples:

* `llamactl serve` — the embedded model on http://127.0.0.1:8080/v1
* `llamactl serve -m ~/models/qwen3-4b.gguf --parallel 8 --api-key s3cret`
* `curl localhost:8080/v1/chat/completions -d '{"messages":[{"role":"user","content":"Hi"}]}'`

Every flag is also an `LLAMACTL_*` environment variable and a config-file key
(`--ctx-size` is `LLAMACTL_N_CTX` / `n_ctx`). See docs/serve.md.
"""


def register(app: typer.Typer) -> None:
    app.command("serve", epilog=EPILOG)(serve_command)


def serve_command(
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            "-m",
            help="GGUF path, alias or name in the models dir.",
            rich_help_panel=_MODEL,
        ),
    ] = None,
    alias: Annotated[
        str | None,
        typer.Option(
            "--alias", "-a", help="Model id reported by /v1/models.", rich_help_panel=_MODEL
        ),
    ] = None,
    host: Annotated[
        str | None,
        typer.Option("--host", help="Address to listen on [127.0.0.1].", rich_help_panel=_SERVER),
    ] = None,
    port: Annotated[
        int | None, typer.Option("--port", help="Port [8080].", rich_help_panel=_SERVER)
    ] = None,
    parallel: Annotated[
        int | None,
        typer.Option(
            "--parallel",
            "-np",
            help="Slots: requests decoded together [4].",
            rich_help_panel=_MODEL,
        ),
    ] = None,
    ctx_size: Annotated[
        int | None,
        typer.Option(
            "--ctx-size",
            "-c",
            help="Total context over all slots [0: min(train, 4096) per slot].",
            rich_help_panel=_MODEL,
        ),
    ] = None,
    threads: Annotated[
        int | None,
        typer.Option(
            "--threads", "-t", help="Compute threads [all cores].", rich_help_panel=_MODEL
        ),
    ] = None,
    batch_size: Annotated[
        int | None,
        typer.Option(
            "--batch-size", "-b", help="Tokens per decode step [512].", rich_help_panel=_MODEL
        ),
    ] = None,
    kv_unified: Annotated[
        bool | None,
        typer.Option(
            "--kv-unified/--no-kv-unified",
            help="One KV buffer for all slots (outputs then vary with load).",
            rich_help_panel=_MODEL,
        ),
    ] = None,
    chat_template_file: Annotated[
        Path | None,
        typer.Option(
            "--chat-template-file",
            help="Jinja file replacing the model's template.",
            rich_help_panel=_MODEL,
        ),
    ] = None,
    api_key: Annotated[
        str | None,
        typer.Option(
            "--api-key", help="Accepted API key(s), comma-separated.", rich_help_panel=_SERVER
        ),
    ] = None,
    api_key_file: Annotated[
        Path | None,
        typer.Option(
            "--api-key-file", help="File with one API key per line.", rich_help_panel=_SERVER
        ),
    ] = None,
    sse_ping_interval: Annotated[
        float | None,
        typer.Option(
            "--sse-ping-interval",
            help="Seconds of stream silence before a ping [30]; -1 disables.",
            rich_help_panel=_SERVER,
        ),
    ] = None,
    max_queue: Annotated[
        int | None,
        typer.Option(
            "--max-queue",
            help="Requests that may wait for a slot; 503 past it [64].",
            rich_help_panel=_SERVER,
        ),
    ] = None,
    metrics: Annotated[
        bool | None,
        typer.Option("--metrics", help="Serve Prometheus /metrics.", rich_help_panel=_SERVER),
    ] = None,
    log_level: Annotated[
        str,
        typer.Option("--log-level", help="debug, info, warning or error.", rich_help_panel=_SERVER),
    ] = "info",
) -> None:
    """Serve the model over HTTP: OpenAI chat completions, completions and Responses,
    Anthropic Messages, with continuous batching across --parallel slots."""
    import uvicorn

    from llamactl.models import resolve_model
    from llamactl.server.app import create_app
    from llamactl.server.request_log import uvicorn_log_config

    keys = [k.strip() for k in api_key.split(",") if k.strip()] if api_key else None
    settings = load_settings(
        {
            "model": model,
            "alias": alias,
            "host": host,
            "port": port,
            "parallel": parallel,
            "n_ctx": ctx_size,
            "threads": threads,
            "batch_size": batch_size,
            "kv_unified": kv_unified,
            "chat_template_file": chat_template_file,
            "api_key": keys,
            "api_key_file": api_key_file,
            "sse_ping_interval": sse_ping_interval,
            "max_queue": max_queue,
            "metrics": metrics,
        }
    )
    resolved = resolve_model(settings)
    settings.resolved_api_keys()  # a missing key file is an error now, not at the first request
    app = create_app(settings, model_path=resolved.path)
    console = stderr_console()
    console.print(
        f"[bold]llamactl serve[/]: {resolved.name} on "
        f"[cyan]http://{settings.host}:{settings.port}/v1[/] "
        f"({settings.parallel} slots{', API keys required' if app.state.llamactl.api_keys else ''})"
    )
    _exit_quietly_after_signals()
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_config=uvicorn_log_config(log_level),
        log_level=log_level,
        timeout_graceful_shutdown=5,
    )


def _exit_quietly_after_signals() -> None:
    """uvicorn shuts down gracefully on SIGINT/SIGTERM, then re-raises the signal to the handler
    it found: the default one kills the process (exit 143 for SIGTERM) or raises
    KeyboardInterrupt into a half-closed event loop. The shutdown is done by then, so the
    handlers it finds do nothing and `serve` returns with exit code 0."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: None)
