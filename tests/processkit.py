"""`python -m llamactl ...` as a real process: a server to start, watch and signal, or a
command to run, with the test's (isolated) environment."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

# SmolLM2's special tokens (ids 0-16) include every end-of-generation token; biasing them away
# keeps a stream going until max_tokens.
NO_EOS = {str(t): -100 for t in range(17)}


@dataclass
class ServeProcess:
    proc: subprocess.Popen[bytes]
    url: str
    stderr_path: Path

    @property
    def rss_kib(self) -> int:
        """The server process's resident memory now (Linux /proc)."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise RuntimeError("no VmRSS line")

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")

    def wait_healthy(self, headers: dict[str, str] | None = None, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"serve exited with {self.proc.returncode}:\n{self.stderr}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            time.sleep(0.1)
        pytest.fail(f"serve never became healthy:\n{self.stderr}")

    def stop(self, sig: signal.Signals, timeout: float = 30) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(timeout)


@contextlib.contextmanager
def serve(
    tmp_path: Path, *args: str, port: int, env: dict[str, str] | None = None
) -> Iterator[ServeProcess]:
    """Start `python -m llamactl serve ARGS`; stderr goes to a file so a chatty server can never
    block on a full pipe. The environment is the test's (already isolated) plus `env`."""
    stderr_path = tmp_path / "serve.stderr"
    with stderr_path.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "llamactl", "serve", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            env={**os.environ.copy(), **(env or {})},
        )
    try:
        yield ServeProcess(proc, f"http://127.0.0.1:{port}", stderr_path)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def run_cli(
    *args: str, timeout: float = 60, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "llamactl", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ.copy(), **(env or {})},
        stdin=subprocess.DEVNULL,
    )
