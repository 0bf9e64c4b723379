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


@functools.cache
def _ggml() -> ctypes.CDLL:
    """The libggml llama-cpp-python loaded (the one whose backend registry llama.cpp reads)."""
    lib_dir = Path(llama_cpp.__file__).parent / "lib"
    for name in ("libggml.so", "libggml.dylib", "ggml.dll"):
        if (lib_dir / name).exists():
            lib = ctypes.CDLL(str(lib_dir / name))
            break
    else:
        raise ModelLoadError(f"--rpc: no libggml beside llama-cpp-python in {lib_dir}")
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
            server = add_server(endpoint.encode())
            if not server:
                raise ModelLoadError(f"--rpc: could not add the RPC server at {endpoint}")
            lib.ggml_backend_register(server)
            _added.add(endpoint)
