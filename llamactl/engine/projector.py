"""An mmproj paired with a text model, through llama.cpp's `mtmd`: the one place it is opened.

Chat prompts with images, decision prompts, speech recognition and speech synthesis all pair
an mmproj with a model. They open it here, so mtmd's log goes one way (its errors kept to
explain a refused file and logged; everything with LLAMACTL_LLAMA_LOG=1) and a wrong file is
refused by our GGUF reader with a message before llama.cpp sees it.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from pathlib import Path
from typing import Any

import llama_cpp
from llama_cpp import mtmd_cpp as mtmd

from llamactl.core.errors import LlamactlError, ModelLoadError
from llamactl.core.gguf_info import GGUFInfo, read_gguf_info

__all__ = [
    "UNSUPPORTED_PROJECTORS",
    "Projector",
    "last_errors",
    "open_mtmd",
    "projector_types",
]

log = logging.getLogger("llamactl.mtmd")
_GGML_ERROR = 4  # ggml.h: 0 none, 1 debug, 2 info, 3 warn, 4 error, 5 continuation
_errors: list[str] = []  # the latest error lines mtmd logged, for refusal messages
_route_lock = threading.Lock()
_routed = False


@llama_cpp.llama_log_callback
def _mtmd_log(level: int, text: bytes, _user: ctypes.c_void_p) -> None:
    """mtmd narrates every chunk it tokenizes: keep its errors (for messages and the log);
    everything with LLAMACTL_LLAMA_LOG=1."""
    line = text.decode("utf-8", "replace").rstrip()
    if level == _GGML_ERROR:
        _errors.append(line.strip())
        del _errors[:-4]
    if level == _GGML_ERROR or os.environ.get("LLAMACTL_LLAMA_LOG") == "1":
        log.warning("%s", line)


def _route_log() -> None:
    global _routed
    with _route_lock:
        if not _routed:
            mtmd.mtmd_log_set(_mtmd_log, None)
            mtmd.mtmd_helper_log_set(_mtmd_log, None)
            _routed = True


def open_mtmd(path: Path, model: llama_cpp.llama_model_p, *, n_threads: int) -> Any:
    """The mtmd context of the mmproj `path` paired with `model` (CPU, no warmup), or None
    when llama.cpp refuses it (`last_errors()` says why)."""
    _route_log()
    _errors.clear()
    params = mtmd.mtmd_context_params_default()
    params.use_gpu = False
    params.n_threads = n_threads
    params.print_timings = False
    params.warmup = False
    return mtmd.mtmd_init_from_file(str(path).encode(), model, params) or None


def last_errors() -> str:
    """What mtmd logged as errors while opening the last mmproj ("no detail" if nothing)."""
    return "; ".join(e for e in _errors if e) or "no detail"


# Projector types of decision towers the pinned llama.cpp's mtmd does not know (it answers
# "unknown projector type"): d1-omni's SigLIP-style vision tower and its conformer audio tower.
UNSUPPORTED_PROJECTORS = {
    "d1omni_v": "d1-omni's vision tower",
    "d1omni_a": "d1-omni's audio tower",
}


def projector_types(info: GGUFInfo) -> list[str]:
    """Every projector type an mmproj header names (one file may hold vision and audio)."""
    keys = ("clip.projector_type", "clip.vision.projector_type", "clip.audio.projector_type")
    found = [info.get(k) for k in keys]
    return list(dict.fromkeys(str(t).lower() for t in found if t))


class Projector:
    """An mmproj paired with the text model, for prompts with images or audio."""

    def __init__(self, path: Path, model_handle: llama_cpp.llama_model_p, n_threads: int) -> None:
        info = read_gguf_info(path)  # a wrong file is refused with a message, not an abort
        if info.model_type != "mmproj" and info.architecture != "clip":
            raise ModelLoadError(f"{path.name} is not an mmproj file")
        types = projector_types(info)
        unknown = [t for t in types if t in UNSUPPORTED_PROJECTORS]
        if unknown:
            towers = " and ".join(UNSUPPORTED_PROJECTORS[t] for t in unknown)
            raise ModelLoadError(
                f"{path.name} holds {towers} (projector type {', '.join(unknown)}), which the "
                "llama.cpp that llama-cpp-python 0.3.36 builds cannot run; remove or rename "
                "the mmproj to serve the model on text alone"
            )
        ctx = open_mtmd(path, model_handle, n_threads=n_threads)
        if ctx is None:
            named = f" (projector type {', '.join(types)})" if types else ""
            raise ModelLoadError(
                f"mtmd could not load the mmproj {path}{named}: {last_errors()} (the pinned "
                "llama.cpp does not know its projector, or the file does not belong to this "
                "model)"
            )
        self.path = path
        self._ctx: mtmd.mtmd_context_p | None = ctx
        self.marker = mtmd.mtmd_default_marker().decode()
        self.vision = bool(mtmd.mtmd_support_vision(ctx))
        self.audio = bool(mtmd.mtmd_support_audio(ctx))

    @property
    def ctx(self) -> mtmd.mtmd_context_p:
        if self._ctx is None:
            raise LlamactlError(f"the mmproj {self.path.name} is closed")
        return self._ctx

    def close(self) -> None:
        if self._ctx:
            mtmd.mtmd_free(self._ctx)
            self._ctx = None

    def supports(self, kind: str) -> bool:
        return self.vision if kind == "image" else self.audio
