"""Shared by the real-client tests: where the npm agents are, and what a request took from the
server's prompt cache."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from serverkit import LiveServer

__all__ = ["agent_binary", "reused"]

ROOT = Path(__file__).resolve().parents[1]
CLIENTS_DIR = Path(
    os.environ.get("LLAMACTL_CLIENTS_DIR", Path.home() / ".cache" / "llamactl-tests" / "clients")
)


def agent_binary(name: str) -> Path:
    """The agent `name` ("codex", "opencode", "claude" from npm, "aider" from PyPI), installed
    by scripts/install-clients.sh (run here if it was not); skips where npm is missing."""
    if name == "aider":
        path = CLIENTS_DIR / "aider" / "bin" / "aider"
    else:
        path = CLIENTS_DIR / "node_modules" / ".bin" / name
    if not path.exists():
        if name != "aider" and shutil.which("npm") is None:
            pytest.skip("npm is not installed: the agent clients cannot be installed")
        subprocess.run(["bash", str(ROOT / "scripts" / "install-clients.sh")], check=True)
    assert path.exists(), f"scripts/install-clients.sh did not install {name}"
    return path


def reused(live: LiveServer, request: Callable[[], Any]) -> tuple[Any, int, int]:
    """Run `request`; with the prompt tokens it took from the cache and decoded anew."""
    stats = live.state.engine.stats
    cached, decoded = stats.prompt_tokens_cached, stats.prompt_tokens_processed
    out = request()
    return out, stats.prompt_tokens_cached - cached, stats.prompt_tokens_processed - decoded
