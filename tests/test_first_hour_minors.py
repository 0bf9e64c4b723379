"""The minors of a new user's first hour (issue #19), each on the real CLI or server:
`-n 0` refused as the server refuses `max_tokens: 0`, a small `--ctx-size` honoured, an
unknown voice listed, and no llama.cpp log line before the CLI's `Error:` line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from serverkit import run_server
from typer.testing import CliRunner

from llamactl.cli.main import app

LONG_PROMPT = "word " * 131  # the 131-token prompt: more than --ctx-size 16


def invoke(*args: str) -> object:
    return CliRunner().invoke(app, list(args))


def test_max_tokens_zero_is_refused_before_loading() -> None:
    result = invoke("chat", "-n", "0", "hi")
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: max_tokens must be -1 (no limit) or at least 1")
    assert result.stdout == ""


def test_max_tokens_minus_one_is_still_no_limit() -> None:
    from llamactl.config import load_settings

    assert load_settings({"max_tokens": -1}).max_tokens is None
    assert load_settings({"max_tokens": 3}).max_tokens == 3


@pytest.mark.slow
def test_a_prompt_longer_than_a_small_ctx_size_is_refused() -> None:
    result = invoke("chat", "--ctx-size", "16", LONG_PROMPT)
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: the request exceeds the available context size")
    assert "a slot holds 16" in result.stderr
    assert result.stdout == ""


@pytest.mark.slow
def test_the_engine_keeps_the_asked_slot_size() -> None:
    from llamactl import Engine, EngineConfig, Model
    from llamactl.models import embedded_model_path

    path = embedded_model_path()
    assert path is not None
    model = Model(path)
    engine = Engine(model, EngineConfig(n_ctx=64, n_parallel=2))
    try:
        assert engine.n_ctx_slot == 32  # llama.cpp pads each slot's cells to 256
    finally:
        engine.close()
        model.close()


@pytest.mark.slow
def test_the_server_answers_400_for_a_prompt_over_ctx_size() -> None:
    with run_server(parallel=1, ctx_size=16) as live:
        r = httpx.post(
            live.v1 + "/chat/completions",
            json={"messages": [{"role": "user", "content": LONG_PROMPT}], "max_tokens": 4},
            timeout=60,
        )
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["type"] == "exceed_context_size_error"
    assert "exceeds the available context size" in error["message"]


def test_an_unknown_voice_lists_the_voices() -> None:
    result = invoke("tts", "hello", "--voice", "vulcan", "--format", "pcm")
    assert result.exit_code == 1
    assert "unknown voice 'vulcan'" in result.stderr
    assert "en-us" in result.stderr and "piqd" in result.stderr  # piqd is eSpeak's Klingon


def test_a_failed_load_prints_only_the_error_line(tmp_path: Path) -> None:
    """llama.cpp's own log lines are held back (LLAMACTL_LLAMA_LOG=1 shows them)."""
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"garbage, not a GGUF file" * 8)
    done = subprocess.run(
        [sys.executable, "-m", "llamactl", "chat", "-m", str(bad), "hi"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert done.stderr.startswith("Error: llama.cpp could not load"), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
