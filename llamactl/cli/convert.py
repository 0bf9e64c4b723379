"""`llamactl convert`: a Hugging Face decision-model checkpoint to GGUF (llamactl.converters)."""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from llamactl.cli._output import human_size, stderr_console, stdout_console

HELP = """Convert a decision-model checkpoint to GGUF, in llama.cpp's own layout.

SRC is a Hugging Face checkpoint directory (config.json, tokenizer.json, safetensors: bf16 and
sharded checkpoints included; no torch needed). The family is detected from its files:
lfm2-d1, lfm2-d1-omni, MiniCPM-OCR-Jev, OpenJev, h2o-lightning, and the lev / kev LoRA adapters,
which are merged into the base checkpoint given with --base. The file is written atomically: an
interrupted conversion leaves nothing behind.
"""

EPILOG = """**Examples**

```
llamactl convert ./d1-3B --outfile d1-3B-f16.gguf
llamactl convert ./d1-3B --outfile d1-3B.gguf --mmproj         # writes mmproj-d1-3B.gguf
llamactl convert ./lev --base ./Qwen3.5-4B --outfile lev-q8_0.gguf --outtype q8_0
llamactl convert ./openjev --outfile x.gguf --dry-run            # the tensor map, nothing written
```
"""


class OutTypeChoice(str, Enum):
    """The values of `--outtype` (llamactl.converters.OutType, without importing gguf here)."""

    F32 = "f32"
    F16 = "f16"
    BF16 = "bf16"
    Q8_0 = "q8_0"


def register(app: typer.Typer) -> None:
    app.command("convert", help=HELP, epilog=EPILOG)(convert_command)


def convert_command(
    src: Annotated[
        Path,
        typer.Argument(
            help="The checkpoint directory (or lev/kev adapter).", metavar="SRC", file_okay=False
        ),
    ],
    outfile: Annotated[
        Path,
        typer.Option(
            "--outfile",
            "-o",
            help="The GGUF file to write (with --mmproj: mmproj-OUT.gguf beside it).",
            metavar="OUT.gguf",
            dir_okay=False,
        ),
    ],
    outtype: Annotated[
        OutTypeChoice,
        typer.Option("--outtype", help="Type of the weight matrices (norms and biases stay f32)."),
    ] = OutTypeChoice.F16,
    mmproj: Annotated[
        bool, typer.Option("--mmproj", help="Write the vision projector (mmproj) instead.")
    ] = False,
    base: Annotated[
        Path | None,
        typer.Option(
            "--base",
            help="Base checkpoint a lev/kev LoRA adapter is merged into.",
            metavar="PATH",
            file_okay=False,
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="List the tensor map; write nothing.")
    ] = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="No progress bar and no summary.")
    ] = False,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the result (or tensor map) as JSON.")
    ] = False,
) -> None:
    from llamactl.converters import convert  # numpy and gguf load only when converting

    result = convert(
        src,
        outfile,
        outtype=outtype.value,
        mmproj=mmproj,
        base=base,
        dry_run=dry_run,
        progress=not quiet,
        console=stderr_console(),
    )
    if json_output:
        sys.stdout.write(json.dumps(result_dict(result, dry_run), indent=2) + "\n")
        return
    if dry_run:
        print_tensor_map(result)
    elif not quiet:
        print_summary(result)


def result_dict(result: Any, dry_run: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "outfile": str(result.outfile),
        "decision_type": result.decision_type,
        "architecture": result.arch,
        "kind": result.kind,
        "dry_run": dry_run,
        "loads_natively": result.loads_natively,
        "head_tensors": result.head_tensors,
        "notes": result.notes,
    }
    if result.written is not None:
        out |= {
            "bytes": result.written.nbytes,
            "tensor_count": result.written.n_tensors,
            "seconds": round(result.written.seconds, 3),
        }
    if dry_run:
        out["tensors"] = [
            {
                "name": r.name,
                "shape": list(r.shape),
                "type": r.type,
                "bytes": r.nbytes,
                "source": r.source,
            }
            for r in result.tensors
        ]
    return out


def print_tensor_map(result: Any) -> None:
    console = stdout_console()
    table = Table(box=None, pad_edge=False, header_style="bold")
    for col in ("GGUF tensor", "shape", "type", "size", "from"):
        table.add_column(col, justify="right" if col == "size" else "left")
    head = set(result.head_tensors)
    for r in result.tensors:
        name = Text(r.name, style="yellow" if r.name in head else "")
        shape = "×".join(str(d) for d in r.shape)
        table.add_row(name, shape, r.type, human_size(r.nbytes), r.source)
    console.print(table)
    total = sum(r.nbytes for r in result.tensors)
    console.print(
        f"{len(result.tensors)} tensors, {human_size(total)}: {result.decision_type} "
        f"({result.arch}, {result.kind}) -> {result.outfile} (dry run: nothing written)",
        soft_wrap=True,
        markup=False,
    )
    for note in result.notes:
        console.print(Text(note, style="dim"), soft_wrap=True)


def print_summary(result: Any) -> None:
    console = stdout_console()
    w = result.written
    console.print(
        f"Wrote {result.outfile} ({human_size(w.nbytes)}, {w.n_tensors} tensors): "
        f"{result.decision_type} ({result.arch}, {result.kind}) in {w.seconds:.1f} s",
        soft_wrap=True,
        markup=False,
    )
    for note in result.notes:
        console.print(Text(note, style="dim"), soft_wrap=True)
