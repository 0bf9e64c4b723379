"""llama.cpp's quantizer behind a progress bar, shared by `llamactl quantize` and `convert`.

llama.cpp reports no progress of its own; the engine reads the growing output file, and the bar
measures it against the size the type usually gives (bits per weight of the F16 source), so
it is an estimate that ends at 100 % when the file is complete.
"""

from __future__ import annotations

import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

from llamactl import InvalidRequestError

__all__ = ["QUANT_OUTTYPES", "estimated_size", "quantize_file"]

# `--outtype` / `quantize TYPE` value -> llama.cpp's name, and about how many bits a weight takes
QUANT_OUTTYPES: dict[str, tuple[str, float]] = {
    "q4_0": ("Q4_0", 4.5),
    "q4_k_m": ("Q4_K_M", 4.9),
    "q5_k_m": ("Q5_K_M", 5.7),
    "q8_0": ("Q8_0", 8.5),
}


def llama_type(name: str) -> str:
    """llama.cpp's name of a quantization type, or a clear error naming the known ones."""
    key = name.lower()
    if key not in QUANT_OUTTYPES:
        raise InvalidRequestError(
            f"unknown quantization type {name!r}; known: {', '.join(QUANT_OUTTYPES)}"
        )
    return QUANT_OUTTYPES[key][0]


def estimated_size(source: Path, type_name: str) -> int:
    """About how large `source` (an F16 file, or F32 / BF16) becomes in `type_name`."""
    bits = QUANT_OUTTYPES[type_name.lower()][1]
    return max(1, int(source.stat().st_size * bits / 16))


def quantize_file(
    source: Path,
    target: Path,
    type_name: str,
    *,
    progress: bool,
    console: Console,
) -> tuple[Path, float]:
    """Quantize `source` into `target` (atomically) with a bar on a terminal; (path, seconds)."""
    from llamactl import quantize_gguf  # llama.cpp loads only when quantizing

    kind = llama_type(type_name)
    if not source.is_file():
        raise InvalidRequestError(f"no GGUF at {source}")
    if target.is_dir():
        raise InvalidRequestError(f"{target} is a directory; give the output file name")
    if not target.parent.is_dir():
        raise InvalidRequestError(f"the output directory {target.parent} does not exist")
    start = time.perf_counter()
    if not (progress and console.is_terminal):
        quantize_gguf(source, target, kind)
        return target, time.perf_counter() - start
    total = estimated_size(source, type_name)
    bar = Progress(
        TextColumn(f"quantizing to {kind}"),
        BarColumn(),
        DownloadColumn(binary_units=True),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )
    with bar:
        task = bar.add_task("", total=total)

        def seen(nbytes: int) -> None:
            bar.update(task, completed=min(nbytes, int(total * 0.99)))

        quantize_gguf(source, target, kind, progress=seen)
        bar.update(task, completed=total)
    return target, time.perf_counter() - start
