"""`llamactl convert`: a Hugging Face checkpoint (a chat model or a decision model) to GGUF,
optionally quantized by llama.cpp (llamactl.converters, then the engine's quantizer)."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from llamactl import ConvertError
from llamactl.cli._help import PlainHelpCommand
from llamactl.cli._output import human_size, stderr_console, stdout_console
from llamactl.cli._quantize import QUANT_OUTTYPES, quantize_file

HELP = """Convert a Hugging Face checkpoint to GGUF, in llama.cpp's own layout.

SRC is a checkpoint directory (config.json, tokenizer.json, safetensors: bf16 and sharded
checkpoints included; no torch needed). Plain chat models are told by config.json
`architectures`: LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Qwen3.5, Lfm2ForCausalLM,
Gemma3ForCausalLM. Decision models by their files: lfm2-d1, lfm2-d1-omni, MiniCPM-OCR-Jev,
OpenJev, h2o-lightning, and the lev / kev LoRA adapters, which are merged into the base
checkpoint given with --base. q4_0, q4_k_m and q5_k_m are written as f16 first, then quantized
by llama.cpp. The file is written atomically: an interrupted conversion leaves nothing behind.
"""

EPILOG = """\b
Examples:
  llamactl convert --example /tmp/ex           # tiny checkpoints to try
  llamactl convert /tmp/ex/llama --outfile llama-q4.gguf --outtype q4_k_m
  llamactl convert ./d1-3B --outfile d1-3B-f16.gguf
  llamactl convert ./d1-3B --outfile d1-3B.gguf --mmproj  # + its mmproj
  llamactl convert ./lev --base ./Qwen3.5-4B --outfile lev.gguf --outtype q8_0
  llamactl convert ./openjev --outfile x.gguf --dry-run  # tensor map only
"""

NATIVE_OUTTYPES = ("f32", "f16", "bf16", "q8_0")  # written by the converter itself
OUTTYPES = (*NATIVE_OUTTYPES, *(t for t in QUANT_OUTTYPES if t not in NATIVE_OUTTYPES))


def register(app: typer.Typer) -> None:
    app.command("convert", help=HELP, epilog=EPILOG, cls=PlainHelpCommand)(convert_command)


def _complete_outtype(incomplete: str) -> list[str]:
    return [t for t in OUTTYPES if t.startswith(incomplete.lower())]


def convert_command(
    src: Annotated[
        Path | None,
        typer.Argument(
            help="The checkpoint directory (or lev/kev adapter).", metavar="SRC", file_okay=False
        ),
    ] = None,
    outfile: Annotated[
        Path | None,
        typer.Option(
            "--outfile",
            "-o",
            help="The GGUF file to write (with --mmproj: mmproj-OUT.gguf beside it).",
            metavar="OUT.gguf",
            dir_okay=False,
        ),
    ] = None,
    outtype: Annotated[
        str,
        typer.Option(
            "--outtype",
            help="Type of the weight matrices: " + ", ".join(OUTTYPES) + " (norms stay f32).",
            metavar="TYPE",
            autocompletion=_complete_outtype,
        ),
    ] = "f16",
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
    example: Annotated[
        Path | None,
        typer.Option(
            "--example",
            help="Write a tiny checkpoint of every family into DIR (to try convert offline).",
            metavar="DIR",
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
    if example is not None:
        write_examples(example, quiet=quiet, json_output=json_output)
        return
    if src is None or outfile is None:
        raise ConvertError("give the checkpoint SRC and --outfile OUT.gguf (or --example DIR)")
    kind = outtype.lower()
    if kind not in OUTTYPES:
        raise ConvertError(f"unknown --outtype {outtype!r}; choose one of {', '.join(OUTTYPES)}")
    if kind not in NATIVE_OUTTYPES and mmproj:
        raise ConvertError(f"--mmproj writes {', '.join(NATIVE_OUTTYPES)}, not {kind}")
    from llamactl.converters import convert  # numpy and gguf load only when converting

    console = stderr_console()
    if kind in NATIVE_OUTTYPES or dry_run:
        result = convert(
            src,
            outfile,
            outtype=kind if kind in NATIVE_OUTTYPES else "f16",
            mmproj=mmproj,
            base=base,
            dry_run=dry_run,
            progress=not quiet,
            console=console,
        )
        if dry_run and kind not in NATIVE_OUTTYPES:
            result.notes.append(f"shown as f16: llama.cpp then quantizes the file to {kind}")
        quantized: tuple[Path, float] | None = None
    else:
        staged = outfile.with_name(f".{outfile.name}.{os.getpid()}.f16.gguf")
        try:
            result = convert(
                src,
                staged,
                outtype="f16",
                base=base,
                progress=not quiet,
                console=console,
            )
            quantized = quantize_file(staged, outfile, kind, progress=not quiet, console=console)
        finally:
            with contextlib.suppress(FileNotFoundError):
                staged.unlink()
        result.outfile = outfile
    if json_output:
        out = result_dict(result, dry_run)
        out["outtype"] = kind
        if quantized is not None:
            out["bytes"] = outfile.stat().st_size
            out["seconds"] = round(out.get("seconds", 0.0) + quantized[1], 3)
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
        return
    if dry_run:
        print_tensor_map(result)
    elif not quiet:
        print_summary(result, kind, quantized)


def write_examples(root: Path, *, quiet: bool, json_output: bool) -> None:
    from llamactl.converters.examples import write_examples as build_all

    if root.exists() and not root.is_dir():
        raise ConvertError(f"{root} exists and is not a directory")
    made = build_all(root)
    if json_output:
        sys.stdout.write(json.dumps({k: str(v) for k, v in made.items()}, indent=2) + "\n")
        return
    if quiet:
        return
    console = stdout_console()
    console.print(f"Wrote {len(made)} tiny checkpoints to {root}:", markup=False)
    for name, path in made.items():
        console.print(f"  {name:<24} {path}", markup=False, soft_wrap=True)
    console.print(
        f"Try: llamactl convert {made['llama']} --outfile llama.gguf\n"
        f"     llamactl convert {made['lev']} --base {made['qwen35']} --outfile lev.gguf",
        markup=False,
        soft_wrap=True,
    )


def result_dict(result: Any, dry_run: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "outfile": str(result.outfile),
        "family": result.family,
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
        f"{len(result.tensors)} tensors, {human_size(total)}: {result.family} "
        f"({result.arch}, {result.kind}) -> {result.outfile} (dry run: nothing written)",
        soft_wrap=True,
        markup=False,
    )
    for note in result.notes:
        console.print(Text(note, style="dim"), soft_wrap=True)


def print_summary(result: Any, kind: str, quantized: tuple[Path, float] | None) -> None:
    console = stdout_console()
    w = result.written
    size = result.outfile.stat().st_size if quantized else w.nbytes
    seconds = w.seconds + (quantized[1] if quantized else 0.0)
    console.print(
        f"Wrote {result.outfile} ({human_size(size)}, {w.n_tensors} tensors, {kind}): "
        f"{result.family} ({result.arch}, {result.kind}) in {seconds:.1f} s",
        soft_wrap=True,
        markup=False,
    )
    for note in result.notes:
        console.print(Text(note, style="dim"), soft_wrap=True)
