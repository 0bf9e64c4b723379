"""The coding agents people point at a local server, run unchanged against llamactl: Codex CLI
(`codex exec`, the Responses API) on Gemma 3 270M, whose 32k context holds the agent's ~6k-token
prompt with its tools. The agents come from npm (scripts/install-clients.sh).

A 270M model is no coding agent: what these tests hold llamactl to is that every request the
agent sends is accepted and answered in a stream the agent reads, and that a new session reuses
the previous session's prompt (docs/clients.md)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from clientkit import agent_binary, reused
from model_matrix import gemma_path
from serverkit import LiveServer, run_server

MODEL_FIXTURES = {"gemma_server"}


@pytest.fixture(scope="module")
def gemma_server() -> Iterator[LiveServer]:
    # greedy and short answers: the agent's own requests set neither
    with run_server(model=str(gemma_path()), parallel=1, temperature=0, max_tokens=400) as live:
        yield live


def codex_session(
    live: LiveServer, tmp: Path, prompt: str, max_requests: int
) -> list[dict[str, Any]]:
    """One `codex exec --json` session with its home and project under `tmp`; its events.

    A 270M model may call tools round after round (what it calls depends on the path and date
    in the prompt), and `codex exec` has no turn limit: the session is stopped when it sends a
    request past `max_requests`, so the ones before it have been answered in full."""
    home, work = tmp / "home", tmp / "work"
    home.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    provider = f'{{name="llamactl", base_url="{live.v1}", wire_api="responses"}}'
    command = [
        str(agent_binary("codex")),
        "exec",
        "--json",
        "--skip-git-repo-check",
        "-c",
        "model_provider=llamactl",
        "-c",
        f"model_providers.llamactl={provider}",
        "-m",
        "gemma",
        prompt,
    ]
    env = {**os.environ, "CODEX_HOME": str(home), "NO_COLOR": "1"}
    stats = live.state.engine.stats
    first = stats.requests_total
    out_path, err_path = tmp / f"codex-{first}.jsonl", tmp / f"codex-{first}.err"
    with (
        out_path.open("w") as out,
        err_path.open("w") as err,
        subprocess.Popen(
            command, cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err
        ) as codex,
    ):
        deadline = time.monotonic() + 600
        try:
            while codex.poll() is None and stats.requests_total - first <= max_requests:
                assert time.monotonic() < deadline, f"codex ran 10 minutes: {err_path.read_text()}"
                time.sleep(0.2)
        finally:
            if codex.poll() is None:
                codex.terminate()
            codex.wait(timeout=60)
    stdout, stderr = out_path.read_text(), err_path.read_text()
    events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    assert events, f"codex printed no events (exit {codex.returncode}): {stderr[-2000:]}"
    return events


def refused(events: list[dict[str, Any]]) -> list[str]:
    """Errors that say llamactl refused a request (an HTTP 4xx/5xx body), not that the model's
    answer ran out of tokens."""
    messages = [
        str(e.get("message") or e.get("error", {}).get("message"))
        for e in events
        if e.get("type") in ("error", "turn.failed")
    ]
    return [m for m in messages if '"code"' in m or "invalid_request" in m or "status" in m]


@pytest.mark.timeout(1500)  # two agent sessions: a cold ~6k-token prefill, then a warm one
def test_codex_sessions_are_accepted_streamed_and_cached(
    gemma_server: LiveServer, tmp_path: Path
) -> None:
    first = codex_session(gemma_server, tmp_path, "Say hi in three words.", max_requests=3)
    assert not refused(first), refused(first)
    kinds = {e["type"] for e in first}
    assert {"thread.started", "turn.started"} <= kinds
    items = [e["item"]["type"] for e in first if e["type"] == "item.completed"]
    assert {"agent_message", "command_execution", "reasoning"} & set(items), items

    # A new session in the same project sends the same instructions, tools and context: all
    # but its own prompt is reused (the first system message is ~17 KB of instructions)
    second, cached, decoded = reused(
        gemma_server, lambda: codex_session(gemma_server, tmp_path, "Say hello in two words.", 1)
    )
    assert not refused(second), refused(second)
    assert cached > 4000 and cached > 10 * decoded, (cached, decoded)
