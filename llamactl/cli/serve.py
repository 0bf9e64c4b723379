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
_ROUTER = "Router: many models, one child process each"
_CACHE = "Prompt cache and checkpoints"
_SPEC = "Speculative decoding"
_EDGE = "HTTP edge: origins, hosts, body limits"
_LIMITS = "Request limits (docs/serve.md, Request limits)"
_SPEECH = "Speech limits (docs/transcribe.md, docs/api-realtime.md)"
LOG_LEVELS = ("debug", "info", "warning", "error")

EPILOG = """
Examples:

* `llamactl serve` — the embedded model on http://127.0.0.1:8080/v1
* `llamactl serve -m ~/models/qwen3-4b.gguf --parallel 8 --api-key s3cret`
* `curl localhost:8080/v1/chat/completions -d '{"messages":[{"role":"user","content":"Hi"}]}'`

Every flag but --log-level is also an `LLAMACTL_*` environment variable and a config-file key
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
    cache_type: Annotated[
        str | None,
        typer.Option(
            "--cache-type",
            "-ctk",
            help="KV cache type: bf16 (outputs independent of batching), f16 or q8_0 [bf16].",
            rich_help_panel=_CACHE,
        ),
    ] = None,
    cache_ram: Annotated[
        int | None,
        typer.Option(
            "--cache-ram",
            "-cram",
            help="RAM prompt cache in MiB [8192; -1: no limit; 0: off; decision models: off].",
            rich_help_panel=_CACHE,
        ),
    ] = None,
    cache_idle_slots: Annotated[
        bool | None,
        typer.Option(
            "--cache-idle-slots/--no-cache-idle-slots",
            help="Save an idle slot's prompt to the cache before a new request takes it [on].",
            rich_help_panel=_CACHE,
        ),
    ] = None,
    slot_prompt_similarity: Annotated[
        float | None,
        typer.Option(
            "--slot-prompt-similarity",
            "-sps",
            help="Reuse the idle slot sharing more than this share of a prompt [0.10; 0: LRU].",
            rich_help_panel=_CACHE,
        ),
    ] = None,
    ctx_checkpoints: Annotated[
        int | None,
        typer.Option(
            "--ctx-checkpoints",
            "-ctxcp",
            help="Checkpoints per slot for hybrid/recurrent/SWA models [32].",
            rich_help_panel=_CACHE,
        ),
    ] = None,
    checkpoint_min_step: Annotated[
        int | None,
        typer.Option(
            "--checkpoint-min-step",
            "-cms",
            help="Tokens between checkpoints, the last user message aside [8192].",
            rich_help_panel=_CACHE,
        ),
    ] = None,
    spec_type: Annotated[
        str | None,
        typer.Option(
            "--spec-type",
            help="Speculators, comma-separated: ngram-simple, ngram-cache, draft-simple [none].",
            rich_help_panel=_SPEC,
        ),
    ] = None,
    model_draft: Annotated[
        str | None,
        typer.Option(
            "--model-draft",
            "-md",
            help="Draft model for draft-simple (same vocabulary as --model).",
            rich_help_panel=_SPEC,
        ),
    ] = None,
    spec_draft_n_max: Annotated[
        int | None,
        typer.Option(
            "--spec-draft-n-max", help="Most tokens per draft [3].", rich_help_panel=_SPEC
        ),
    ] = None,
    spec_draft_n_min: Annotated[
        int | None,
        typer.Option(
            "--spec-draft-n-min", help="Shorter drafts are dropped [0].", rich_help_panel=_SPEC
        ),
    ] = None,
    spec_draft_p_min: Annotated[
        float | None,
        typer.Option(
            "--spec-draft-p-min",
            help="Draft model: stop drafting below this probability [0.0].",
            rich_help_panel=_SPEC,
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
    # HTTP edge: who may call and how much a request may send (docs/serve.md, Security)
    cors_origins: Annotated[
        str | None,
        typer.Option(
            "--cors-origins",
            help="Web origins allowed to call, comma-separated: localhost (pages on this "
            "machine), * (any) or scheme://host[:port] [localhost].",
            rich_help_panel=_EDGE,
        ),
    ] = None,
    allowed_hosts: Annotated[
        str | None,
        typer.Option(
            "--allowed-hosts",
            help="Host names answered besides loopback ones, comma-separated; * answers any "
            "[none: loopback names only when bound to loopback].",
            rich_help_panel=_EDGE,
        ),
    ] = None,
    max_body_size: Annotated[
        int | None,
        typer.Option(
            "--max-body-size",
            help="Largest request body in MiB; 413 past it [32].",
            rich_help_panel=_EDGE,
        ),
    ] = None,
    shutdown_grace: Annotated[
        float | None,
        typer.Option(
            "--shutdown-grace",
            help="On SIGTERM or Ctrl-C, seconds running generations may finish; queued ones "
            "end at once, a second signal ends all [10].",
        ),
    ] = None,
    body_timeout: Annotated[
        float | None,
        typer.Option(
            "--body-timeout",
            help="Seconds to receive a whole request body; 408 past it [60].",
            rich_help_panel=_EDGE,
        ),
    ] = None,
    max_messages: Annotated[
        int | None,
        typer.Option(
            "--max-messages",
            help="Most chat messages / Responses input items per request [4096].",
            rich_help_panel=_LIMITS,
        ),
    ] = None,
    max_stop_strings: Annotated[
        int | None,
        typer.Option(
            "--max-stop-strings",
            help="Most stop strings per request [32].",
            rich_help_panel=_LIMITS,
        ),
    ] = None,
    max_stop_length: Annotated[
        int | None,
        typer.Option(
            "--max-stop-length",
            help="Longest stop string, in characters [512].",
            rich_help_panel=_LIMITS,
        ),
    ] = None,
    max_tools: Annotated[
        int | None,
        typer.Option("--max-tools", help="Most tools per request [128].", rich_help_panel=_LIMITS),
    ] = None,
    max_schema_bytes: Annotated[
        int | None,
        typer.Option(
            "--max-schema-bytes",
            help="Largest JSON schema or GBNF grammar, in bytes [262144].",
            rich_help_panel=_LIMITS,
        ),
    ] = None,
    max_schema_depth: Annotated[
        int | None,
        typer.Option(
            "--max-schema-depth",
            help="Deepest nesting in a JSON schema [64].",
            rich_help_panel=_LIMITS,
        ),
    ] = None,
    max_json_values: Annotated[
        int | None,
        typer.Option(
            "--max-json-values",
            help="Most JSON values in a body over 1 MiB; 413 past it [262144].",
            rich_help_panel=_LIMITS,
        ),
    ] = None,
    max_audio_seconds: Annotated[
        float | None,
        typer.Option(
            "--max-audio-seconds",
            help="Longest transcription upload, in seconds of audio [3600].",
            rich_help_panel=_SPEECH,
        ),
    ] = None,
    max_audio_upload_mib: Annotated[
        int | None,
        typer.Option(
            "--max-audio-upload-mib",
            help="Largest transcription upload in MiB; 413 past it [64].",
            rich_help_panel=_SPEECH,
        ),
    ] = None,
    realtime_max_buffer_seconds: Annotated[
        float | None,
        typer.Option(
            "--realtime-max-buffer-seconds",
            help="Input audio a realtime session may hold untranscribed [1200].",
            rich_help_panel=_SPEECH,
        ),
    ] = None,
    realtime_max_sessions: Annotated[
        int | None,
        typer.Option(
            "--realtime-max-sessions",
            help="Realtime connections served at once [32].",
            rich_help_panel=_SPEECH,
        ),
    ] = None,
    models_dir: Annotated[
        Path | None,
        typer.Option(
            "--models-dir",
            help="Router mode: serve every GGUF file in DIR, each loaded on demand.",
            metavar="DIR",
            file_okay=False,
            rich_help_panel=_ROUTER,
        ),
    ] = None,
    models_preset: Annotated[
        Path | None,
        typer.Option(
            "--models-preset",
            help="Router mode: TOML file of named models with their own settings.",
            rich_help_panel=_ROUTER,
        ),
    ] = None,
    models_max: Annotated[
        int | None,
        typer.Option(
            "--models-max",
            help="Models loaded at once; the least recently used is unloaded [4; 0: no limit].",
            rich_help_panel=_ROUTER,
        ),
    ] = None,
    models_autoload: Annotated[
        bool | None,
        typer.Option(
            "--models-autoload/--no-models-autoload",
            help="Load a model on its first request [on]; ?autoload= overrides per request.",
            rich_help_panel=_ROUTER,
        ),
    ] = None,
    sleep_idle_seconds: Annotated[
        float | None,
        typer.Option(
            "--sleep-idle-seconds",
            help="Unload a model idle this many seconds [-1: never].",
            rich_help_panel=_ROUTER,
        ),
    ] = None,
    log_level: Annotated[
        str,
        typer.Option("--log-level", help="debug, info, warning or error.", rich_help_panel=_SERVER),
    ] = "info",
) -> None:
    """Serve the model over HTTP: OpenAI chat completions, completions, Responses and the
    Realtime websocket, Anthropic Messages, /tts and /v1/systemone, batched across --parallel
    slots; with --models-dir or --models-preset, a router over many models."""
    from llamactl.models import resolve_model
    from llamactl.server.app import create_app

    if log_level.lower() not in LOG_LEVELS:  # uvicorn would fail later with a ValueError
        raise typer.BadParameter(
            f"expected one of {', '.join(LOG_LEVELS)}", param_hint="--log-level"
        )
    log_level = log_level.lower()
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
            "cache_type": cache_type,
            "cache_ram": cache_ram,
            "cache_idle_slots": cache_idle_slots,
            "slot_prompt_similarity": slot_prompt_similarity,
            "ctx_checkpoints": ctx_checkpoints,
            "checkpoint_min_step": checkpoint_min_step,
            "spec_type": _split_list(spec_type),
            "model_draft": model_draft,
            "spec_draft_n_max": spec_draft_n_max,
            "spec_draft_n_min": spec_draft_n_min,
            "spec_draft_p_min": spec_draft_p_min,
            "chat_template_file": chat_template_file,
            "api_key": keys,
            "api_key_file": api_key_file,
            "sse_ping_interval": sse_ping_interval,
            "max_queue": max_queue,
            "metrics": metrics,
            "models_dir": models_dir,
            "models_preset": models_preset,
            "models_max": models_max,
            "models_autoload": models_autoload,
            "sleep_idle_seconds": sleep_idle_seconds,
            "cors_origins": _split_list(cors_origins),
            "allowed_hosts": _split_list(allowed_hosts),
            "max_body_size": max_body_size,
            "body_timeout": body_timeout,
            "shutdown_grace": shutdown_grace,
            "max_messages": max_messages,
            "max_stop_strings": max_stop_strings,
            "max_stop_length": max_stop_length,
            "max_tools": max_tools,
            "max_schema_bytes": max_schema_bytes,
            "max_schema_depth": max_schema_depth,
            "max_json_values": max_json_values,
            "max_audio_seconds": max_audio_seconds,
            "max_audio_upload_mib": max_audio_upload_mib,
            "realtime_max_buffer_seconds": realtime_max_buffer_seconds,
            "realtime_max_sessions": realtime_max_sessions,
        }
    )
    if models_dir is not None or settings.models_preset is not None:
        _serve_router(settings, models_dir is not None, log_level)
        return
    from llamactl import InvalidRequestError, parse_spec_types

    try:
        parse_spec_types(settings.spec_type)
    except InvalidRequestError as e:
        raise typer.BadParameter(str(e), param_hint="--spec-type") from None
    resolved = resolve_model(settings)
    settings.resolved_api_keys()  # a missing key file is an error now, not at the first request
    app = create_app(settings, model_path=resolved.path)
    console = stderr_console()
    console.print(
        f"[bold]llamactl serve[/]: {resolved.name} on "
        f"[cyan]http://{settings.host}:{settings.port}/v1[/] "
        f"({settings.parallel} slots{', API keys required' if app.state.llamactl.api_keys else ''})"
    )
    _run(app, settings, log_level)


def _split_list(text: str | None) -> list[str] | None:
    return [part.strip() for part in text.split(",") if part.strip()] if text else None


def _serve_router(settings, scan_dir: bool, log_level: str) -> None:
    """Router mode: no model of its own; a child `llamactl serve` per model, on demand."""
    from llamactl.server.router import create_router_app

    app = create_router_app(settings, models_dir=settings.models_dir if scan_dir else None)
    state = app.state.llamactl
    stderr_console().print(
        f"[bold]llamactl serve[/] (router): {len(state.manager.catalog)} models on "
        f"[cyan]http://{settings.host}:{settings.port}/v1[/] "
        f"(at most {settings.models_max or 'any number'} loaded"
        f"{', API keys required' if state.api_keys else ''})"
    )
    _run(app, settings, log_level)


def _run(app, settings, log_level: str) -> None:
    """`uvicorn.run`, with a graceful stop: the first SIGTERM/SIGINT stops taking requests and
    ends the queued ones, running generations get `--shutdown-grace` seconds to finish, then
    the rest end with a final error event (never a cut connection or a CancelledError
    traceback); a second signal ends them at once. The exit code is 0."""
    import asyncio
    import contextlib
    import time

    import uvicorn

    from llamactl.server.edge.uvicorn_options import uvicorn_options
    from llamactl.server.request_log import uvicorn_log_config

    state = app.state.llamactl

    def stop_generating() -> None:
        if state.engine is not None:
            state.engine.close()  # every open stream gets EngineClosedError, then ends

    async def drain_then_stop() -> None:
        drain = getattr(state.engine, "drain", None)  # a decision model's engine has none
        if drain is None or settings.shutdown_grace <= 0:
            stop_generating()
            return
        drain()
        deadline = time.monotonic() + settings.shutdown_grace
        while state.engine is not None and state.engine.busy_slots and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        stop_generating()

    draining: set[asyncio.Task] = set()  # holds the drain task until the process ends

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: object) -> None:
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

    options = uvicorn_options(
        settings,
        log_config=uvicorn_log_config(log_level),
        log_level=log_level,
        # connections are waited for while generations drain, then a little more
        timeout_graceful_shutdown=settings.shutdown_grace + 5,
    )
    config = uvicorn.Config(app, **options)
    server = Server(config)
    _exit_quietly_after_signals()
    server.run()  # a port in use or a failed startup exits with uvicorn's code 3


def _exit_quietly_after_signals() -> None:
    """uvicorn shuts down gracefully on SIGINT/SIGTERM, then re-raises the signal to the handler
    it found: the default one kills the process (exit 143 for SIGTERM) or raises
    KeyboardInterrupt into a half-closed event loop. The shutdown is done by then, so the
    handlers it finds do nothing and `serve` returns with exit code 0."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: None)
