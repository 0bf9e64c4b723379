"""One-time llama.cpp backend set-up (initialise once per process, route its log), and the
handles every context and model has, checked once where they are taken.

llama.cpp prints every load detail on stderr by default; a terminal tool must stay quiet
unless asked, so the log callback forwards only warnings and errors (or everything with
LLAMACTL_LLAMA_LOG=1) to Python's logging.

The bindings' types are in typings/llama_cpp (a pointer result is an int, or None for NULL);
`memory_of`, `vocab_of` and `model_of` turn the handles llama.cpp never leaves NULL for a live
context or model into non-optional ones, so callers pass them on without a check each.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import threading
from collections.abc import Iterator
from typing import TypeVar

import llama_cpp

from llamactl.core.errors import LlamactlError

__all__ = ["ensure_backend", "held_errors", "memory_of", "model_of", "require", "vocab_of"]

_log = logging.getLogger("llamactl.llama_cpp")
_init_lock = threading.Lock()
_initialised = False

# ggml log levels (ggml.h): 0 none, 1 debug, 2 info, 3 warn, 4 error, 5 continuation of the
# previous line (logged at the debug level here)
_LEVELS = {
    0: logging.INFO,
    1: logging.DEBUG,
    2: logging.INFO,
    3: logging.WARNING,
    4: logging.ERROR,
}


_held = threading.local()  # .lines: the errors held back in this thread (see `held_errors`)


@llama_cpp.llama_log_callback
def _forward_log(level: int, text: bytes, _user_data: ctypes.c_void_p) -> None:
    py_level = _LEVELS.get(level, logging.DEBUG)
    line = text.decode("utf-8", "replace").rstrip()
    if os.environ.get("LLAMACTL_LLAMA_LOG") == "1":
        _log.warning("%s", line)
    elif py_level >= logging.ERROR:
        held = getattr(_held, "lines", None)
        if held is not None:
            held.append(line)
        else:
            _log.log(py_level, "%s", line)


@contextlib.contextmanager
def held_errors() -> Iterator[list[str]]:
    """Keep llama.cpp's error lines of this thread for the caller to report, instead of
    printing them before the caller's own one-line error (a failed model load)."""
    previous = getattr(_held, "lines", None)
    lines: list[str] = []
    _held.lines = lines
    try:
        yield lines
    finally:
        _held.lines = previous


def ensure_backend() -> None:
    """Initialise llama.cpp's backends exactly once (thread-safe)."""
    global _initialised
    with _init_lock:
        if _initialised:
            return
        llama_cpp.llama_log_set(_forward_log, ctypes.c_void_p(0))
        llama_cpp.llama_backend_init()
        _initialised = True


def memory_of(ctx: llama_cpp.llama_context_p) -> llama_cpp.llama_memory_t:
    """The context's memory (its KV cache)."""
    return require(llama_cpp.llama_get_memory(ctx), "llama_get_memory")


def model_of(ctx: llama_cpp.llama_context_p) -> llama_cpp.llama_model_p:
    """The model a context was made from."""
    return require(llama_cpp.llama_get_model(ctx), "llama_get_model")


def vocab_of(model: llama_cpp.llama_model_p) -> llama_cpp.llama_vocab_p:
    """The model's vocabulary."""
    return require(llama_cpp.llama_model_get_vocab(model), "llama_model_get_vocab")


_H = TypeVar("_H")


def require(handle: _H | None, call: str) -> _H:
    """A handle llama.cpp returned; its NULL (None through ctypes) as an error."""
    if handle is None:
        raise LlamactlError(f"llama.cpp's {call} returned NULL")
    return handle
