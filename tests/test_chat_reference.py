"""The chat converters against llama.cpp's own converter (scripts/chat_reference.py), as an
opt-in test: it needs an interpreter with torch and transformers (`LLAMACTL_REFERENCE_PYTHON`)
and a llama.cpp b11434 tree (`LLAMACTL_REFERENCE_LLAMA_CPP`, e.g. the extracted sdist)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PYTHON = os.environ.get("LLAMACTL_REFERENCE_PYTHON")
LLAMA_CPP = os.environ.get("LLAMACTL_REFERENCE_LLAMA_CPP")
SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "chat_reference.py"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (PYTHON and LLAMA_CPP),
        reason="set LLAMACTL_REFERENCE_PYTHON and LLAMACTL_REFERENCE_LLAMA_CPP to compare",
    ),
]


def test_both_converters_write_the_same_chat_files(tmp_path):
    args = [sys.executable, str(SCRIPT), "--json", "--work", str(tmp_path)]
    args += ["--converter-python", str(PYTHON), "--llama-cpp", str(LLAMA_CPP)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=1200)
    report = json.loads(done.stdout)
    assert report["unexplained"] == 0, json.dumps(report, indent=1)
    assert done.returncode == 0
    jobs = {f["job"] for f in report["files"]}
    for family in ("llama", "qwen2", "qwen3", "qwen35", "lfm2", "gemma3"):
        assert {f"{family}-f16", f"{family}-q8_0"} <= jobs
