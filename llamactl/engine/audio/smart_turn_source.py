"""Where Smart Turn's ONNX file comes from, and fetching it from PyPI.

The file ships inside the `pipecat-ai` wheel; llamactl does not depend on pipecat-ai (its
dependencies are a whole voice framework). `pip install` of llamactl takes the file out of
that wheel into the package (setup.py calls `fetch_from_pypi` at build time), so semantic
turn detection works straight after the README's install, offline from then on.

Standard library only: setup.py loads this file by path, before any dependency exists.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import tempfile
import urllib.request
import zipfile
from pathlib import Path
from urllib.parse import urljoin

__all__ = [
    "DISTRIBUTION",
    "MEMBER",
    "PACKAGED",
    "SMART_TURN_FILE",
    "VERSION",
    "fetch_from_pypi",
]

SMART_TURN_FILE = "smart-turn-v3.2-cpu.onnx"
DISTRIBUTION, VERSION = "pipecat-ai", "1.14.0"  # the wheel that carries SMART_TURN_FILE
MEMBER = f"pipecat/audio/turn/smart_turn/data/{SMART_TURN_FILE}"
PACKAGED = Path(__file__).with_name("smart_turn") / SMART_TURN_FILE  # where an install puts it
_INDEX = "https://pypi.org/pypi"


def fetch_from_pypi(target: Path, *, timeout: float = 60.0) -> Path:
    """`target` from the pipecat-ai wheel on PyPI (its SHA-256 checked against PyPI's), written
    whole or not at all; OSError (URLError included) or ValueError when it cannot be."""
    index = os.environ.get("LLAMACTL_PYPI_JSON", _INDEX).rstrip("/")
    # the project's JSON (every release): some mirrors answer only that one, not /VERSION/json
    listing = f"{index}/{DISTRIBUTION}/json"
    with urllib.request.urlopen(listing, timeout=timeout) as r:
        files = json.load(r)["releases"].get(VERSION, [])
    wheel = next((f for f in files if f["packagetype"] == "bdist_wheel"), None)
    if wheel is None:
        raise ValueError(f"{DISTRIBUTION} {VERSION} has no wheel on PyPI")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        path = Path(tmp) / "wheel.zip"
        digest = hashlib.sha256()
        url = urljoin(listing, wheel["url"])  # a mirror may list it relative to the listing
        try:
            with urllib.request.urlopen(url, timeout=timeout) as r, open(path, "wb") as out:
                while block := r.read(1 << 20):
                    digest.update(block)
                    out.write(block)
        except http.client.HTTPException as exc:  # cut off: the callers catch OSError
            raise OSError(f"the {DISTRIBUTION} wheel's download broke off ({exc!r})") from None
        if digest.hexdigest() != wheel["digests"]["sha256"]:
            raise ValueError(f"the {DISTRIBUTION} wheel's SHA-256 does not match PyPI's")
        part = Path(tmp) / SMART_TURN_FILE
        try:
            with zipfile.ZipFile(path) as zf:
                part.write_bytes(zf.read(MEMBER))
        except (KeyError, zipfile.BadZipFile) as exc:
            raise ValueError(f"the {DISTRIBUTION} wheel has no {MEMBER}: {exc}") from None
        os.replace(part, target)
    return target
