"""`--list-devices`, one listing for every command that records (`transcribe`, `tui`)."""

from __future__ import annotations

import typer

__all__ = ["print_input_devices"]


def print_input_devices() -> None:
    """The input devices on stdout, the default marked `*`. None found is an answer, not a
    failure: a note on stderr and exit 0 (a missing PortAudio is the error, exit 1)."""
    from llamactl.devices import input_devices

    devices = input_devices()
    if not devices:
        typer.echo("No input devices found.", err=True)
        return
    for dev in devices:
        mark = "*" if dev["is_default"] else " "
        typer.echo(
            f"{mark} {dev['index']:>3}  {dev['name']}  "
            f"({dev['channels']} ch, {dev['default_rate']} Hz)"
        )
