"""One-time llama.cpp backend set-up: initialise once per process and route its log.

llama.cpp prints every load detail on stderr by default; a terminal tool must stay quiet
unless asked, so the log callback forwards only warnings and errors (or everything with
LLAMACTL_LLAMA_LOG=1) to Python's logging.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading

import llama_cpp

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


@llama_cpp.llama_log_callback
def _forward_log(level: int, text: bytes, _user_data: ctypes.c_void_p) -> None:
    py_level = _LEVELS.get(level, logging.DEBUG)
    if os.environ.get("LLAMACTL_LLAMA_LOG") == "1":
        _log.warning("%s", text.decode("utf-8", "replace").rstrip())
    elif py_level >= logging.ERROR:
        _log.log(py_level, "%s", text.decode("utf-8", "replace").rstrip())


def ensure_backend() -> None:
    """Initialise llama.cpp's backends exactly once (thread-safe)."""
    global _initialised
    with _init_lock:
        if _initialised:
            return
        llama_cpp.llama_log_set(_forward_log, ctypes.c_void_p(0))
        llama_cpp.llama_backend_init()
        _initialised = True
