"""`llamactl quantize IN OUT TYPE`: a GGUF quantized by llama.cpp's own quantizer."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from llamactl.cli._help import PlainHelpCommand
from llamactl.cli._output import human_size, stderr_console, stdout_console
from llamactl.cli._quantize import QUANT_OUTTYPES, llama_type, quantize_file

HELP = (
    """Quantize a GGUF (f32, f16 or bf16, as `llamactl convert` writes it) with llama.cpp.

TYPE is one of """
    + ", ".join(QUANT_OUTTYPES)
    + """ (llama.cpp's Q4_0, Q4_K_M, Q5_K_M,
Q8_0). OUT is written atomically: an interrupted run leaves no file behind.
"""
)

EPILOG = """\b
Examples:
  llamactl quantize llama-f16.gguf llama-q4_k_m.gguf q4_k_m
"""


def register(app: typer.Typer) -> None:
    app.command("quantize", help=HELP, epilog=EPILOG, cls=PlainHelpCommand)(quantize_command)


def _complete_type(incomplete: str) -> list[str]:
    return [t for t in QUANT_OUTTYPES if t.startswith(incomplete.lower())]


def quantize_command(
    source: Annotated[
        Path, typer.Argument(help="The GGUF to quantize.", metavar="IN", dir_okay=False)
    ],
    target: Annotated[
        Path, typer.Argument(help="The GGUF to write.", metavar="OUT", dir_okay=False)
    ],
    type_name: Annotated[
        str,
        typer.Argument(
            help="q4_0, q4_k_m, q5_k_m or q8_0.", metavar="TYPE", autocompletion=_complete_type
        ),
    ],
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="No progress bar and no summary.")
    ] = False,
) -> None:
    kind = llama_type(type_name)  # a clear error before llama.cpp loads
    path, seconds = quantize_file(
        source, target, type_name, progress=not quiet, console=stderr_console()
    )
    if not quiet:
        stdout_console().print(
            f"Wrote {path} ({human_size(path.stat().st_size)}, {kind}) in {seconds:.1f} s",
            soft_wrap=True,
            markup=False,
        )
