"""scripts/haproxy_config.py: the configuration docs/scale.md shows is the one it writes, and
HAProxy accepts it; bad replica addresses are a clear error."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "haproxy_config.py"
EXAMPLE = ["10.0.0.11:8080", "10.0.0.12:8080", "10.0.0.13:8080"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=30
    )


def test_the_documented_configuration_is_the_generated_one() -> None:
    doc = (ROOT / "docs" / "scale.md").read_text()
    shown = re.search(r"```haproxy\n(.*?)```", doc, re.S)
    assert shown is not None
    assert shown.group(1) == run(*EXAMPLE).stdout


@pytest.mark.skipif(shutil.which("haproxy") is None, reason="haproxy is not installed")
def test_haproxy_accepts_it(tmp_path: Path) -> None:
    cfg = tmp_path / "llamactl.cfg"
    cfg.write_text(run(*EXAMPLE, "--bind", "127.0.0.1:18080").stdout)
    checked = subprocess.run(["haproxy", "-c", "-f", str(cfg)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.parametrize("bad", ["10.0.0.1", "host:0", "host:99999", "a b:80"])
def test_a_bad_replica_address_is_refused_clearly(bad: str) -> None:
    result = run("10.0.0.11:8080", bad)
    assert result.returncode == 2
    assert f"expected HOST:PORT, got {bad!r}" in result.stderr and "Traceback" not in result.stderr


def test_ipv6_and_names_are_addresses() -> None:
    out = run("[fd00::1]:8080", "replica-2.internal:8080").stdout
    assert "server r1 [fd00::1]:8080 id 1" in out
    assert "server r2 replica-2.internal:8080 id 2 track stateless/r2" in out
