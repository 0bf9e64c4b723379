#!/usr/bin/env python3
"""llama.cpp's RPC backend for the installed llama-cpp-python, built beside it, cached.

`llamactl serve --rpc` needs a llama-cpp-python built with `GGML_RPC=ON`, and the other hosts
need llama.cpp's `ggml-rpc-server` of the same llama.cpp (its protocol version must match).
Rebuilding llama-cpp-python takes its own virtual environment and ~12 minutes; this builds
just the shared libraries the binding loads (llama, ggml with RPC, mtmd) and the server, from
the vendored llama.cpp in the binding's own sdist, into

    ~/.cache/llamactl/rpc-<version>/llama.cpp/build/bin

and prints, as one JSON object, what to run them with:

    {"env": {"LLAMA_CPP_LIB_PATH": ..., "MTMD_CPP_LIB": ...}, "rpc_server": ".../ggml-rpc-server"}

With that `env`, the installed llama-cpp-python loads the RPC build instead of its own
libraries (its documented override). The opt-in test (`LLAMACTL_TEST_RPC=1 pytest
tests/test_rpc.py`) and anyone trying `--rpc` on one machine use it. A finished build is
marked by a stamp written last; an interrupted one resumes (cmake and ninja are incremental).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from llama_cpp_sdist import cache_dir, extract_llama_cpp, log  # noqa: E402

TARGETS = ("llama", "mtmd", "ggml-rpc-server")
CMAKE_FLAGS = (
    "-DGGML_RPC=ON",
    "-DBUILD_SHARED_LIBS=ON",
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_SERVER=OFF",
)
STAMP = ".built"


def build(cache: Path, jobs: int) -> Path:
    """The build's bin folder (libraries and ggml-rpc-server), built if not yet."""
    package = f"llama-cpp-python=={version('llama-cpp-python')}"
    source = extract_llama_cpp(cache, lambda _member: True, "CMakeLists.txt", package)
    out = source / "build"
    if (out / STAMP).exists():
        return out / "bin"
    for tool in ("cmake", "ninja"):
        if not shutil.which(tool):
            sys.exit(f"rpc_build: {tool} is not installed (apt-get install {tool}, or pip)")
    log(f"building llama.cpp with GGML_RPC=ON ({', '.join(TARGETS)}; ~10 min on 2 cores) ...")
    subprocess.run(
        ["cmake", "-S", str(source), "-B", str(out), "-G", "Ninja", *CMAKE_FLAGS],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    ninja = ["ninja", "-C", str(out), f"-j{jobs}", *TARGETS]
    subprocess.run(ninja, check=True, stdout=sys.stderr)  # progress; stdout is the JSON
    (out / STAMP).write_text(package + "\n", encoding="utf-8")
    return out / "bin"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="ninja -j")
    args = parser.parse_args()
    cache = cache_dir(f"rpc-{version('llama-cpp-python')}")
    bin_dir = build(cache, args.jobs)
    env = {"LLAMA_CPP_LIB_PATH": str(bin_dir), "MTMD_CPP_LIB": str(bin_dir)}
    print(json.dumps({"env": env, "rpc_server": str(bin_dir / "ggml-rpc-server")}))


if __name__ == "__main__":
    main()
