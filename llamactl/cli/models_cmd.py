"""`llamactl models`: what `--model` can name, read from GGUF headers (no model is loaded)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from llamactl import ModelNotFoundError
from llamactl.cli._help import PlainHelpCommand
from llamactl.cli._output import human_size, stdout_console
from llamactl.config import Settings, load_settings
from llamactl.models import ModelEntry, is_projector, list_models, resolve_model

HELP = """List the models that --model can name.

These are the embedded default, the aliases in the config file and the GGUF files in the
models directory, with what their headers say (no model is loaded). The default model, used
when no --model is given, is marked with *.
"""

EPILOG = """\b
Examples:
  llamactl models                          # a table
  llamactl models --models-dir ~/gguf      # look somewhere else
  llamactl models --json | jq -r '.[].name'
"""


def register(app: typer.Typer) -> None:
    app.command("models", help=HELP, epilog=EPILOG, cls=PlainHelpCommand)(models_command)


def models_command(
    models_dir: Annotated[
        Path | None,
        typer.Option(
            "--models-dir",
            help="Directory to scan for GGUF files (default: from the config).",
            metavar="DIR",
            file_okay=False,
        ),
    ] = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print a JSON array instead of a table.")
    ] = False,
) -> None:
    settings = load_settings({"models_dir": models_dir})
    found = list_models(settings)
    entries = [e for e in found if not is_projector(e)]  # paired with a model, not one
    projectors = [e for e in found if is_projector(e)]
    default = _default_path(settings)
    if json_output:
        rows = [entry_dict(e, default) for e in entries]
        sys.stdout.write(json.dumps(rows, indent=2, ensure_ascii=False) + "\n")
        return
    console = stdout_console()
    if not entries:
        console.print(
            f"No models found. Put GGUF files in {settings.models_dir} or pass --model PATH.",
            soft_wrap=True,
            markup=False,
        )
        return
    print_table(console, entries, default)
    if projectors:
        names = ", ".join(e.name for e in projectors)
        console.print(
            Text(f"Projectors (paired with their model, --mmproj): {names}", style="dim"),
            soft_wrap=True,
        )
    where = settings.models_dir
    missing = "" if where.is_dir() else " (does not exist)"
    console.print(Text(f"Models directory: {where}{missing}", style="dim"), soft_wrap=True)


def _default_path(settings: Settings) -> Path | None:
    """The file a bare `llamactl chat` would load, or None if it does not resolve."""
    try:
        return resolve_model(settings).path.absolute()
    except ModelNotFoundError:
        return None


def _is_default(entry: ModelEntry, default: Path | None) -> bool:
    return default is not None and entry.path.absolute() == default


def entry_dict(entry: ModelEntry, default: Path | None) -> dict[str, Any]:
    return {
        "name": entry.name,
        "path": str(entry.path),
        "source": entry.source,
        "default": _is_default(entry, default),
        "size_bytes": entry.size_bytes,
        "architecture": entry.architecture,
        "context_length": entry.context_length,
        "capabilities": list(entry.capabilities),
        "file_type": entry.file_type,
        "error": entry.error,
    }


def _short_path(path: Path) -> str:
    home = str(Path.home())
    text = str(path)
    return "~" + text[len(home) :] if home != "/" and text.startswith(home + "/") else text


def models_table(
    entries: list[ModelEntry], default: Path | None, *, with_path: bool = True
) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column("NAME", no_wrap=True)
    table.add_column("SIZE", justify="right", no_wrap=True)
    table.add_column("ARCH", no_wrap=True)
    table.add_column("CONTEXT", justify="right", no_wrap=True)
    table.add_column("CAPABILITIES", min_width=len("CAPABILITIES"))
    table.add_column("SOURCE", no_wrap=True)
    if with_path:
        table.add_column("PATH", no_wrap=True)
    for e in entries:
        name = Text(e.name + (" *" if _is_default(e, default) else ""), style="bold")
        path = [_short_path(e.path)] if with_path else []
        if e.error:
            error = Text(e.error, style="red")
            table.add_row(name, "", Text("unreadable", style="red"), "", error, e.source, *path)
            continue
        table.add_row(
            name,
            human_size(e.size_bytes) if e.size_bytes is not None else "",
            e.architecture or "",
            f"{e.context_length:,}" if e.context_length else "",
            ", ".join(e.capabilities),
            e.source,
            *path,
        )
    return table


def print_table(console: Console, entries: list[ModelEntry], default: Path | None) -> None:
    """The full table when it fits the terminal; without the paths (see --json) otherwise."""
    table = models_table(entries, default)
    unbounded = console.options.update(width=1_000_000)
    if Measurement.get(console, unbounded, table).maximum <= console.width:
        console.print(table)
        return
    console.print(models_table(entries, default, with_path=False))
    console.print(Text("Paths left out to fit the terminal; see --json.", style="dim"))
