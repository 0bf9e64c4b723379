"""llama.cpp's RPC backend: other hosts' `rpc-server`s as devices, for a model too big for one.

llama-server's `--rpc HOST:PORT,...` registers each server as a backend device before the
model loads; the layers then go to those devices as they would to GPUs (`-ngl`). llama-cpp-
python binds neither the registration nor ggml's backend registry, so the three functions
come from its own libggml through ctypes. A build without `GGML_RPC=ON` has no RPC backend:
that is a clear error naming the rebuild, never a model silently loaded on the CPU alone.
"""

from __future__ import annotations

import ctypes
import functools
import os
import socket
import threading
from pathlib import Path

import llama_cpp

from llamactl.core.endpoints import check_host_port
from llamactl.core.errors import ModelLoadError

from ._backend import ensure_backend

__all__ = ["REBUILD", "add_rpc_servers", "rpc_unsupported"]

REBUILD = (
    'CMAKE_ARGS="-DGGML_RPC=ON" pip install --force-reinstall --no-cache-dir '
    "--no-binary llama-cpp-python llama-cpp-python==0.3.36"
)
_lock = threading.Lock()
_added: set[str] = set()  # endpoints registered in this process (registering twice adds twice)


def rpc_unsupported() -> str | None:
    """Why --rpc cannot work with this llama-cpp-python (its build), or None."""
    ensure_backend()
    if llama_cpp.llama_supports_rpc():
        return None
    return (
        "--rpc needs llama-cpp-python built with llama.cpp's RPC backend; this one was "
        f"built without it. Rebuild it: {REBUILD}"
    )


# ggml's sonames: libllama names one of these, and it is already loaded when ensure_backend ran
_SONAMES = ("libggml.so.0", "libggml.0.dylib", "libggml.dylib", "ggml.dll")


@functools.cache
def _ggml() -> ctypes.CDLL:
    """The libggml llama.cpp itself loaded: its backend registry is the one models read.

    A wheel holds copies, not symlinks (`libggml.so` and `libggml.so.0` are two files), so
    opening a file by path can load a second ggml with a registry of its own; the soname of
    the one libllama linked finds that one. The folder beside llama-cpp-python (or
    `LLAMA_CPP_LIB_PATH`) is the fallback."""
    ensure_backend()
    lib: ctypes.CDLL | None = None
    for soname in _SONAMES:
        try:
            lib = ctypes.CDLL(soname, mode=getattr(os, "RTLD_NOLOAD", 0) | ctypes.RTLD_GLOBAL)
            break
        except OSError:
            continue
    if lib is None:
        default = Path(llama_cpp.__file__).parent / "lib"
        lib_dir = Path(os.environ.get("LLAMA_CPP_LIB_PATH") or default)
        found = [lib_dir / n for n in ("libggml.so.0", *_SONAMES[1:]) if (lib_dir / n).exists()]
        if not found:
            raise ModelLoadError(f"--rpc: no libggml beside llama-cpp-python in {lib_dir}")
        lib = ctypes.CDLL(str(found[0]))
    lib.ggml_backend_reg_by_name.argtypes = [ctypes.c_char_p]
    lib.ggml_backend_reg_by_name.restype = ctypes.c_void_p
    lib.ggml_backend_reg_get_proc_address.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.ggml_backend_reg_get_proc_address.restype = ctypes.c_void_p
    lib.ggml_backend_register.argtypes = [ctypes.c_void_p]
    lib.ggml_backend_register.restype = None
    return lib


def add_rpc_servers(endpoints: tuple[str, ...]) -> None:
    """Register each `rpc-server` as a device (once per process), as llama-server's --rpc."""
    if not endpoints:
        return
    for endpoint in endpoints:
        try:
            check_host_port(endpoint)
        except ValueError as exc:
            raise ModelLoadError(f"--rpc: {exc}") from None
    missing = rpc_unsupported()
    if missing:
        raise ModelLoadError(missing)
    with _lock:
        lib = _ggml()
        reg = lib.ggml_backend_reg_by_name(b"RPC")
        if not reg:
            raise ModelLoadError("--rpc: llama.cpp's RPC backend is not registered")
        address = lib.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_rpc_add_server")
        if not address:
            raise ModelLoadError("--rpc: this llama.cpp's RPC backend cannot add servers")
        add_server = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)(address)
        for endpoint in endpoints:
            if endpoint in _added:
                continue
            _check_reachable(endpoint)  # llama.cpp aborts the process on one it cannot reach
            server = add_server(endpoint.encode())
            if not server:
                raise ModelLoadError(f"--rpc: could not add the RPC server at {endpoint}")
            lib.ggml_backend_register(server)
            _added.add(endpoint)


def _check_reachable(endpoint: str, timeout: float = 5.0) -> None:
    """A TCP connection to `endpoint` opens, or a ModelLoadError says why it did not."""
    host, _, port = endpoint.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            pass
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise ModelLoadError(
            f"--rpc: cannot reach the rpc-server at {endpoint}: {reason}"
        ) from None
