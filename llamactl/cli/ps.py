"""`llamactl ps` and `llamactl stop`: what a running server has loaded, and unloading one.

Both talk to the server over HTTP (`GET /models`, `POST /models/unload`), so they work on a
server started anywhere, by anyone, as long as its URL (and key) is known.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer
from rich.console import JustifyMethod
from rich.table import Table

from llamactl import ServerError
from llamactl.cli._help import PlainHelpCommand
from llamactl.cli._output import human_size, stdout_console

PS_HELP = """Show the models loaded in a running server: status, memory, busy slots.

A router (`serve --models-dir/--models-preset`) lists each model's child process; a
single-model server lists its one model.
"""
PS_EPILOG = """\b
Examples:
  llamactl ps                          # the server in your settings
  llamactl ps --url http://box:8080 -a # unloaded and failed models too
  llamactl ps --json | jq -r '.[].name'
"""
STOP_HELP = "Unload a model from a running router: its child process stops."
STOP_EPILOG = """\b
Examples:
  llamactl stop qwen3-4b
  llamactl stop small --url http://127.0.0.1:9000
"""

UrlOption = Annotated[
    str | None,
    typer.Option("--url", help="Server address [http://HOST:PORT of your settings]."),
]
KeyOption = Annotated[
    str | None,
    typer.Option("--api-key", help="Key for a server that requires one [your settings' first]."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def register(app: typer.Typer) -> None:
    app.command("ps", help=PS_HELP, epilog=PS_EPILOG, cls=PlainHelpCommand)(ps_command)
    app.command("stop", help=STOP_HELP, epilog=STOP_EPILOG, cls=PlainHelpCommand)(stop_command)


def ps_command(
    url: UrlOption = None,
    api_key: KeyOption = None,
    show_all: Annotated[
        bool, typer.Option("--all", "-a", help="Also list models that are not loaded.")
    ] = False,
    json_output: JsonOption = False,
) -> None:
    base, headers = _target(url, api_key)
    data = _call("GET", base, "/models", headers)
    rows = [_row(entry) for entry in data.get("data", [])]
    if not show_all:
        rows = [r for r in rows if r["status"] in ("loaded", "loading")]
    if json_output:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return
    console = stdout_console()
    if not rows:
        console.print(f"No models loaded at {base}.", markup=False, soft_wrap=True)
        return
    table = Table(box=None, header_style="bold", pad_edge=False)
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("NAME", "left"),
        ("STATUS", "left"),
        ("MEMORY", "right"),
        ("SLOTS", "right"),
        ("IDLE", "right"),
        ("PID", "right"),
    )
    for column, justify in columns:
        table.add_column(column, justify=justify, no_wrap=True)
    for r in rows:
        status = r["status"] + (f" ({r['message']})" if r.get("message") else "")
        table.add_row(
            r["name"],
            status,
            human_size(r["memory_bytes"]) if r["memory_bytes"] is not None else "-",
            f"{r['slots_busy']}/{r['slots_total']}" if r["slots_total"] else "-",
            f"{r['idle_seconds']:.0f}s" if r["idle_seconds"] is not None else "-",
            str(r["pid"]) if r["pid"] else "-",
        )
    console.print(table)


def stop_command(
    model: Annotated[str, typer.Argument(help="Model name or alias.", show_default=False)],
    url: UrlOption = None,
    api_key: KeyOption = None,
    json_output: JsonOption = False,
) -> None:
    base, headers = _target(url, api_key)
    data = _call("POST", base, "/models/unload", headers, {"model": model})
    if json_output:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        return
    stdout_console().print(f"Stopped {model}", markup=False)


def _row(entry: dict[str, Any]) -> dict[str, Any]:
    """One model as ps shows it; a single-model server's entry has no status: it is loaded."""
    status = entry.get("status") or {"value": "loaded"}
    runtime = entry.get("runtime") or {}
    return {
        "name": entry.get("id"),
        "status": status.get("value"),
        "message": status.get("message"),
        "memory_bytes": runtime.get("memory_bytes"),
        "slots_busy": runtime.get("slots_busy"),
        "slots_total": runtime.get("slots_total"),
        "requests": runtime.get("requests"),
        "idle_seconds": runtime.get("idle_seconds"),
        "pid": runtime.get("pid"),
        "aliases": entry.get("aliases", []),
    }


def _first_tcp_address(host: str) -> str:
    """Where a local client reaches a server told to listen on `host` (llama-server's list)."""
    from llamactl.server.edge.listen import is_unix_socket_path, listen_addresses

    for address in listen_addresses(host):
        if not is_unix_socket_path(address):
            return address if address not in ("0.0.0.0", "::") else "127.0.0.1"
    return "127.0.0.1"


def _target(url: str | None, api_key: str | None) -> tuple[str, dict[str, str]]:
    """The server's base URL and auth header: from the flags, else from the settings."""
    from llamactl.config import load_settings

    settings = load_settings({})
    if url is None:
        host = _first_tcp_address(settings.host)
        host = f"[{host}]" if ":" in host else host
        url = f"http://{host}:{settings.port}"
    if api_key is None:
        keys = settings.resolved_api_keys()
        api_key = keys[0] if keys else None
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return url.rstrip("/"), headers


def _call(
    method: str, base: str, path: str, headers: dict[str, str], body: Any = None
) -> dict[str, Any]:
    import httpx

    try:
        resp = httpx.request(
            method, base + path, headers=headers, json=body, timeout=60, trust_env=False
        )
    except httpx.HTTPError as e:
        raise ServerError(f"no server at {base}: {e}") from None
    if resp.status_code == 404 and path == "/models/unload":
        raise ServerError(
            f"{base} cannot unload models: it is not a router "
            "(start it with --models-dir or --models-preset)"
        )
    try:
        data = resp.json()
    except ValueError:
        data = None
    if resp.status_code >= 400 or not isinstance(data, dict):
        message = _error_message(data) or f"HTTP {resp.status_code}"
        raise ServerError(f"{base}{path}: {message}")
    return data


def _error_message(data: Any) -> str | None:
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        return data["error"].get("message")
    return None
