"""`llamactl serve` as users run it: a real process, its flags, env vars and config keys, its
log lines, and how it stops.

Each server here is its own `python -m llamactl serve` process (a second or two to start), so
there are only two of them; the error exits never load the model.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import time
from pathlib import Path

import httpx
import pytest
import typer.main
from processkit import NO_EOS, run_cli, serve
from serverkit import free_port
from typer.testing import CliRunner

from llamactl.cli.main import app

ROOT = Path(__file__).resolve().parent.parent
HI = [{"role": "user", "content": "Hi"}]


def serve_options() -> list[str]:
    """Every option string of `llamactl serve` (long and short) a user may give; hidden ones
    (`--listen-fd`, between the router and its children) are neither shown nor documented."""
    command = typer.main.get_command(app).commands["serve"]
    return [
        opt
        for p in command.params
        if not getattr(p, "hidden", False)
        for opt in (*p.opts, *p.secondary_opts)
    ]


# ------------------------------------------------------------------------ a running server
@pytest.mark.slow
def test_flags_banner_chat_request_ids_and_sigint(tmp_path: Path) -> None:
    port = free_port()
    args = ["--port", str(port), "--parallel", "2", "--threads", "1", "--ctx-size", "2048"]
    with serve(tmp_path, *args, port=port) as live:
        live.wait_healthy()
        assert re.search(
            rf"llamactl serve: \S+ on http://127\.0\.0\.1:{port}/v1 \(2 slots\)", live.stderr
        )
        health = httpx.get(live.url + "/health", timeout=10)
        generated = health.headers["x-request-id"]
        assert re.fullmatch(r"[0-9a-f]{32}", generated)

        r = httpx.post(
            live.url + "/v1/chat/completions",
            json={"messages": HI, "max_tokens": 3, "temperature": 0},
            headers={"X-Request-Id": "cli-test-42"},
            timeout=60,
        )
        assert r.status_code == 200, r.text
        assert r.headers["x-request-id"] == "cli-test-42"
        assert r.json()["choices"][0]["message"]["role"] == "assistant"

        assert live.stop(signal.SIGINT) == 0
        log = live.stderr
    lines = log.splitlines()
    assert any("[cli-test-42]" in line and "POST /v1/chat/completions" in line for line in lines)
    assert any(f"[{generated}]" in line and "GET /health" in line for line in lines)
    assert "Traceback" not in log
    assert "Finished server process" in log


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_two_signals_at_once_stop_serve_cleanly(tmp_path: Path, sig: signal.Signals) -> None:
    """`timeout` and an impatient Ctrl-C send a second signal within milliseconds: serve
    still stops with exit code 0 and no traceback (uvicorn skips the lifespan's shutdown on
    a second signal; serve runs it)."""
    port = free_port()
    with serve(tmp_path, "--port", str(port), "--threads", "1", port=port) as live:
        deadline = time.monotonic() + 60
        while "Uvicorn running" not in live.stderr and time.monotonic() < deadline:
            time.sleep(0.01)  # up, the model perhaps still loading: as `timeout` finds it
        live.proc.send_signal(sig)
        time.sleep(0.02)
        assert live.stop(sig) == 0
        assert "Traceback" not in live.stderr
        assert "CancelledError" not in live.stderr


@pytest.mark.slow
def test_env_vars_and_config_keys_and_sigterm_mid_stream(tmp_path: Path, isolated_dirs) -> None:
    """Port and slots from LLAMACTL_* (env beats the file), alias, key file and metrics from
    config.toml; SIGTERM while a stream runs ends that stream with an error event and exits 0."""
    port = free_port()
    config = isolated_dirs.config_file
    config.parent.mkdir(parents=True)
    (config.parent / "keys.txt").write_text("# deploy keys\n\nfile-key\n")
    config.write_text(
        'parallel = 1\nalias = "cfg-model"\napi_key_file = "keys.txt"\nmetrics = true\n'
        "threads = 1\n"
    )
    # a 1 s grace: the 2000-token stream cannot finish in it, so it ends with the error event
    env = {"LLAMACTL_PORT": str(port), "LLAMACTL_PARALLEL": "3", "LLAMACTL_SHUTDOWN_GRACE": "1"}
    auth = {"Authorization": "Bearer file-key"}
    with serve(tmp_path, port=port, env=env) as live:
        live.wait_healthy()
        assert f"http://127.0.0.1:{port}/v1 (3 slots, API keys required)" in live.stderr
        assert httpx.get(live.url + "/v1/models", timeout=10).status_code == 401
        models = httpx.get(live.url + "/v1/models", headers=auth, timeout=10).json()
        assert models["data"][0]["id"] == "cfg-model"
        metrics = httpx.get(live.url + "/metrics", headers=auth, timeout=10)
        assert "llamactl:slots_total 3" in metrics.text

        body = {"messages": HI, "max_tokens": 2000, "stream": True, "logit_bias": NO_EOS}
        events: list[dict] = []
        with httpx.stream(
            "POST", live.url + "/v1/chat/completions", json=body, headers=auth, timeout=60
        ) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if not line.startswith("data: {"):
                    continue
                events.append(json.loads(line[6:]))
                if len(events) == 3:
                    live.proc.send_signal(signal.SIGTERM)
        assert live.proc.wait(30) == 0
        log = live.stderr
    # Without ending generations first, uvicorn would cut this stream after its grace period
    # (no final event, a CancelledError traceback in the log).
    assert events[-1]["error"]["type"] == "unavailable_error"
    assert "choices" not in events[-1]
    assert "Traceback" not in log


# ------------------------------------------------------------------------ exits on errors
def test_missing_api_key_file_is_a_clear_error(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-keys.txt"
    result = run_cli("serve", "--api-key-file", str(missing), "--port", str(free_port()))
    assert result.returncode == 1
    assert "cannot read api_key_file" in result.stderr
    assert str(missing) in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_chat_template_file_is_a_clear_error(tmp_path: Path) -> None:
    """At start, as llama-server: not a server that answers 503 for ever."""
    missing = tmp_path / "no-such-template.jinja"
    result = run_cli("serve", "--chat-template-file", str(missing), "--port", str(free_port()))
    assert result.returncode == 1
    assert f"chat template file {missing}" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_busy_port_stops_serve_before_the_model_loads(tmp_path: Path) -> None:
    """Bind first, then load (docs/serve.md, Listening): exit 3 naming the port, and no
    model load started."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        port = taken.getsockname()[1]
        result = run_cli("serve", "--port", str(port), "--log-level", "debug")
    finally:
        taken.close()
    assert result.returncode == 3, result.stderr
    assert f"cannot listen on 127.0.0.1 port {port}" in result.stderr
    assert "Started server process" not in result.stderr  # uvicorn (and the load) never ran
    assert not re.search(r"ready in [\d.]+ s", result.stderr)
    assert "Traceback" not in result.stderr


def test_a_model_that_cannot_load_ends_serve_with_exit_1(tmp_path: Path) -> None:
    """llama-server exits on a model loading error; a server left answering 503 would keep a
    balancer's health check failing and a service manager from restarting it."""
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF but not really")
    result = run_cli("serve", "--model", str(broken), "--port", str(free_port()), timeout=60)
    assert result.returncode == 1
    assert f"Error: could not load the model: llama.cpp could not load {broken}" in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_flag_values() -> None:
    """A value of the wrong kind is a usage error (2); one out of range is a settings error (1),
    as the same value from an env var or the config file would be."""
    not_a_number = run_cli("serve", "--port", "eighty")
    assert not_a_number.returncode == 2
    assert "--port" in not_a_number.stderr
    out_of_range = run_cli("serve", "--port", "70000")
    assert out_of_range.returncode == 1
    assert "port must be between 0 and 65535" in out_of_range.stderr
    level = CliRunner().invoke(app, ["serve", "--log-level", "loud"])
    assert level.exit_code == 2
    assert "expected one of debug, info, warning, error" in level.output
    spec = CliRunner().invoke(app, ["serve", "--spec-type", "ngram-simple,magic"])
    assert spec.exit_code == 2 and "unknown speculator type(s) magic" in spec.output
    ram = run_cli("serve", "--cache-ram", "-5")
    assert ram.returncode == 1 and "cache_ram" in ram.stderr


def test_help_lists_every_flag() -> None:
    result = CliRunner().invoke(app, ["serve", "--help-all"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for opt in serve_options():
        assert re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", result.stdout), opt
    assert "LLAMACTL_" in result.stdout


def test_docs_table_names_every_flag() -> None:
    text = (ROOT / "docs" / "serve.md").read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith("| `-")]
    for opt in serve_options():
        if opt.startswith("--no-"):
            continue
        assert any(f"`{opt}" in row for row in rows), f"{opt} missing from docs/serve.md"
