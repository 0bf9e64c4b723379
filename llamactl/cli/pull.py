"""`llamactl pull`: fetch a GGUF from the Hugging Face hub into the models directory."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from llamactl.cli._help import PlainHelpCommand
from llamactl.cli._output import human_size, is_tty, stderr_console, stdout_console
from llamactl.config import load_settings
from llamactl.hub import hub_endpoint, parse_ref, pull

HELP = """Download a GGUF model from the Hugging Face hub into the models directory.

REPO:QUANT picks that quantization from the repo's GGUF files; REPO:FILE.gguf names a file;
REPO alone takes the repo's only model, else its Q4_K_M. A split model comes whole. Broken
downloads resume where they stopped; every file is checked against the size and SHA-256 the
hub lists. Files land in MODELS_DIR/OWNER/REPO/, so `--model OWNER/REPO/FILE` (without
.gguf) and `llamactl models` find them. HF_ENDPOINT selects a mirror; HF_TOKEN is sent for
gated or private repos.
"""

EPILOG = """\b
Examples:
  llamactl pull bartowski/SmolLM2-135M-Instruct-GGUF:Q4_K_M
  llamactl pull ggml-org/gemma-3-270m-it-GGUF:gemma-3-270m-it-Q8_0.gguf
  llamactl pull Qwen/Qwen3-0.6B-GGUF --models-dir ~/gguf --json
"""


def register(app: typer.Typer) -> None:
    app.command("pull", help=HELP, epilog=EPILOG, cls=PlainHelpCommand)(pull_command)


def pull_command(
    model: Annotated[str, typer.Argument(metavar="REPO[:QUANT|:FILE]", show_default=False)],
    models_dir: Annotated[
        Path | None,
        typer.Option(
            "--models-dir",
            help="Where to save it (default: the config's models directory).",
            metavar="DIR",
            file_okay=False,
        ),
    ] = None,
    revision: Annotated[
        str, typer.Option("--revision", help="Branch, tag or commit of the repo.", metavar="REV")
    ] = "main",
    json_output: Annotated[
        bool, typer.Option("--json", help="Print what was saved as JSON (no progress bar).")
    ] = False,
) -> None:
    ref = parse_ref(model, revision)
    settings = load_settings({"models_dir": models_dir})
    target_dir = Path(settings.models_dir).expanduser()
    show_bar = not json_output and is_tty(sys.stderr)
    if show_bar:
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=stderr_console(),
            transient=True,
        ) as bar:
            tasks: dict[str, TaskID] = {}

            def report(name: str, done: int, total: int) -> None:
                if name not in tasks:
                    tasks[name] = bar.add_task(Path(name).name, total=total or None)
                bar.update(tasks[name], completed=done, total=total or None)

            paths = pull(ref, target_dir, progress=report)
    else:
        if not json_output:
            print(f"downloading {model} from {hub_endpoint()} ...", file=sys.stderr, flush=True)
        paths = pull(ref, target_dir)
    name = paths[0].relative_to(target_dir).with_suffix("").as_posix()
    if json_output:
        out = {
            "model": name,
            "files": [str(p) for p in paths],
            "size_bytes": sum(p.stat().st_size for p in paths),
        }
        print(json.dumps(out))
        return
    size = human_size(sum(p.stat().st_size for p in paths))
    console = stdout_console()
    console.print(f"saved {paths[0]} ({size})", highlight=False)
    console.print(f"use it with: llamactl chat -m {name}", highlight=False)
