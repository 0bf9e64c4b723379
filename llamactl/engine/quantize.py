"""Quantize a GGUF with llama.cpp's own quantizer (`llama_model_quantize`).

Used by `llamactl quantize`, by `llamactl convert --outtype q4_k_m` (and the other k-quants)
and for the Q4_0 / Q8_0 / K-quant copies the benchmarks compare. The output is written beside
the target and moved into place when complete, so an interrupted run never leaves a
half-written GGUF under the requested name. llama.cpp reports no progress, so `progress` is
called with the bytes written so far, read off the growing output file.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from pathlib import Path

import llama_cpp

from llamactl.core.errors import InvalidRequestError, ModelLoadError
from llamactl.engine._backend import ensure_backend, held_errors

__all__ = ["QUANT_TYPES", "quantize", "quantize_gguf"]

# The usual types, by llama.cpp's names (llama_ftype values).
QUANT_TYPES: dict[str, int] = {
    "Q4_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0,
    "Q4_1": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_1,
    "Q5_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q5_0,
    "Q8_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0,
    "Q4_K_M": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M,
    "Q5_K_M": llama_cpp.LLAMA_FTYPE_MOSTLY_Q5_K_M,
    "Q6_K": llama_cpp.LLAMA_FTYPE_MOSTLY_Q6_K,
    "F16": llama_cpp.LLAMA_FTYPE_MOSTLY_F16,
}


def quantize_gguf(
    source: str | os.PathLike[str],
    target: str | os.PathLike[str],
    type_name: str,
    *,
    threads: int = 0,
    allow_requantize: bool = True,
    progress: Callable[[int], None] | None = None,
) -> Path:
    """Write `source` quantized to `type_name` at `target` (atomically); return the target.

    `allow_requantize` lets an already quantized model be quantized again (a Q4_0 copy of
    a Q4_1 model, as the speculation benchmark makes): quality is that of the coarser type.
    """
    key = type_name.upper()
    if key not in QUANT_TYPES:
        raise InvalidRequestError(
            f"unknown quantization type {type_name!r}; known: {', '.join(QUANT_TYPES)}"
        )
    src, dst = Path(source), Path(target)
    if not src.is_file():
        raise ModelLoadError(f"no GGUF at {src}")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = QUANT_TYPES[key]
    params.nthread = threads
    params.allow_requantize = allow_requantize
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.part")
    done = threading.Event()
    watcher = None
    if progress is not None:
        watcher = threading.Thread(target=_watch, args=(tmp, done, progress), daemon=True)
        watcher.start()
    ensure_backend()  # routes llama.cpp's log: its per-tensor lines stay quiet
    try:
        try:
            with held_errors() as errors:
                rc = llama_cpp.llama_model_quantize(
                    str(src).encode(), str(tmp).encode(), llama_cpp.byref(params)
                )
        finally:
            done.set()
            if watcher is not None:
                watcher.join()
        if rc != 0:
            why = f": {errors[-1]}" if errors else ""
            raise ModelLoadError(
                f"llama.cpp could not quantize {src.name} to {key} (code {rc}){why}"
            )
        os.replace(tmp, dst)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    return dst


# the engine face exports `quantize_gguf`: a face name equal to this module's would be replaced
# by the module once anything imports llamactl.engine.quantize
quantize = quantize_gguf


def _watch(path: Path, done: threading.Event, progress: Callable[[int], None]) -> None:
    """Report the size of the file llama.cpp is writing, ten times a second, until done."""
    while not done.wait(0.1):
        with contextlib.suppress(OSError):
            progress(path.stat().st_size)
    with contextlib.suppress(OSError):
        progress(path.stat().st_size)
