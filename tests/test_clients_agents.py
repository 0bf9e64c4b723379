"""The coding agents people point at a local server, run unchanged against llamactl: Codex CLI
(`codex exec`, the Responses API), Claude Code (`claude -p`, Anthropic Messages) and opencode
(`opencode run`, chat completions) on Gemma 3 270M, whose 32k context holds their 6-12k-token
prompts with the tools; aider (`aider --message`) on the embedded SmolLM2. The npm agents and
aider's own virtual environment come from scripts/install-clients.sh.

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

MODEL_FIXTURES = {"gemma_server", "smol_server"}


@pytest.fixture(scope="module")
def gemma_server() -> Iterator[LiveServer]:
    # greedy and short answers: the agent's own requests set neither
    with run_server(model=str(gemma_path()), parallel=1, temperature=0, max_tokens=400) as live:
        yield live


def project(tmp: Path) -> tuple[Path, Path]:
    """An agent's home and project directories under `tmp` (made if missing)."""
    home, work = tmp / "home", tmp / "work"
    home.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    return home, work


def run_agent(
    live: LiveServer,
    command: list[str],
    env: dict[str, str],
    cwd: Path,
    max_requests: int,
) -> str:
    """Run an agent's one-shot command against `live`; what it printed. Every
    request it sent must have been answered 200 at once (agents retry a 400 without telling).

    A 270M model may call tools round after round (what it calls depends on the path and date
    in the prompt), and a one-shot agent has no turn limit: the agent is stopped when it sends
    a request past `max_requests`, so the ones before it have been answered in full."""
    stats = live.state.engine.stats
    first, seen = stats.requests_total, len(live.answered)
    out_path, err_path = cwd.parent / f"agent-{first}.out", cwd.parent / f"agent-{first}.err"
    with (
        out_path.open("w") as out,
        err_path.open("w") as err,
        subprocess.Popen(
            command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err
        ) as agent,
    ):
        deadline = time.monotonic() + 600
        try:
            while agent.poll() is None and stats.requests_total - first <= max_requests:
                assert time.monotonic() < deadline, f"agent ran 10 minutes: {err_path.read_text()}"
                time.sleep(0.2)
        finally:
            if agent.poll() is None:
                agent.terminate()
            agent.wait(timeout=60)
    stdout, stderr = out_path.read_text(), err_path.read_text()
    statuses = [status for _, path, status in live.answered[seen:] if path != "/health"]
    assert statuses and all(s == 200 for s in statuses), (statuses, stderr[-2000:])
    return stdout


def json_events(stdout: str) -> list[dict[str, Any]]:
    """The JSON events an agent printed, one per line (there must be some)."""
    events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    assert events, f"the agent printed no events: {stdout[-2000:]}"
    return events


def codex_session(
    live: LiveServer, tmp: Path, prompt: str, max_requests: int
) -> list[dict[str, Any]]:
    """One `codex exec --json` session with its home and project under `tmp`; its events."""
    home, work = project(tmp)
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
    return json_events(run_agent(live, command, env, work, max_requests))


def claude_session(
    live: LiveServer, tmp: Path, prompt: str, max_requests: int
) -> list[dict[str, Any]]:
    """One `claude -p` session (stream-json) with its home and project under `tmp`; its events.
    Answers are capped at 64 tokens (Claude Code asks 32000 by default)."""
    home, work = project(tmp)
    (work / "notes.txt").write_text("The launch code is 4471.\n")
    command = [
        str(agent_binary("claude")),
        "-p",
        "--output-format",
        "stream-json",
        "--verbose",
        prompt,
    ]
    env = {
        **os.environ,
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": live.url,
        "ANTHROPIC_API_KEY": "none",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "64",
        "NO_COLOR": "1",
    }
    return json_events(run_agent(live, command, env, work, max_requests))


def opencode_session(
    live: LiveServer, tmp: Path, prompt: str, max_requests: int
) -> list[dict[str, Any]]:
    """One `opencode run --format json` session with its home (XDG directories) and project
    under `tmp`; its events. The provider is configured as opencode's docs say for a local
    OpenAI-compatible server, answers capped at 128 tokens (its requests ask 32000)."""
    home, work = project(tmp)
    model = {"name": "gemma", "limit": {"context": 32768, "output": 128}}
    provider = {
        "npm": "@ai-sdk/openai-compatible",
        "name": "llamactl",
        "options": {"baseURL": live.v1},
        "models": {"gemma": model},
    }
    config = {
        "$schema": "https://opencode.ai/config.json",
        "provider": {"llamactl": provider},
        "model": "llamactl/gemma",
        "autoupdate": False,
        "share": "disabled",
    }
    (work / "opencode.json").write_text(json.dumps(config))
    command = [str(agent_binary("opencode")), "run", "--format", "json", "-m", "llamactl/gemma"]
    command.append(prompt)
    env = {
        **os.environ,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "PWD": str(work),  # opencode takes its project from $PWD, not the working directory
        "NO_COLOR": "1",
    }
    return json_events(run_agent(live, command, env, work, max_requests))


@pytest.mark.timeout(1500)  # two agent sessions: a cold ~6k-token prefill, then a warm one
def test_codex_sessions_are_accepted_streamed_and_cached(
    gemma_server: LiveServer, tmp_path: Path
) -> None:
    stats = gemma_server.state.engine.stats
    before = stats.requests_total
    first = codex_session(gemma_server, tmp_path, "Say hi in three words.", max_requests=3)
    sent = stats.requests_total - before
    kinds = {e["type"] for e in first}
    assert {"thread.started", "turn.started"} <= kinds
    items = [e["item"]["type"] for e in first if e["type"] == "item.completed"]
    # Codex read an answer: an item of the model's, the cut the server reported (a 270M
    # model may write its first reply past max_tokens; Codex then ends the turn), or its next
    # request (a call Codex could not run goes back to the model without an item)
    cut = [e for e in first if "reason: max_output_tokens" in json.dumps(e)]
    assert {"agent_message", "command_execution", "reasoning"} & set(items) or cut or sent > 1, (
        items,
        sent,
    )

    # A new session in the same project sends the same instructions, tools and context: all
    # but its own prompt is reused (the first system message is ~17 KB of instructions)
    second, cached, decoded = reused(
        gemma_server, lambda: codex_session(gemma_server, tmp_path, "Say hello in two words.", 1)
    )
    assert cached > 4000 and cached > 10 * decoded, (cached, decoded)


@pytest.mark.timeout(1500)  # two sessions: a cold ~12k-token prefill, then warm ones
def test_claude_code_sessions_are_accepted_streamed_and_cached(
    gemma_server: LiveServer, tmp_path: Path
) -> None:
    # Gemma answers with a cut call (it copies a tool's description into the arguments), so
    # Claude Code asks it to resume: the second request resends the first whole
    prompt = "Read the file notes.txt and tell me what it says."
    first, cached, decoded = reused(
        gemma_server, lambda: claude_session(gemma_server, tmp_path, prompt, max_requests=2)
    )
    assert first[0]["type"] == "system" and first[0]["subtype"] == "init", first[0]
    assert "Read" in first[0]["tools"]
    assert cached > 10000 and decoded > 10000, (cached, decoded)

    # A new session in the same project: its billing line differs (dropped by the server), the
    # ~9k tokens of instructions and tools before the user's prompt are reused; the prompt and
    # the environment message Claude Code sends after it (~2.5k tokens) are decoded
    second, cached, decoded = reused(
        gemma_server, lambda: claude_session(gemma_server, tmp_path, "Say hi in three words.", 1)
    )
    assert second[0]["type"] == "system"
    assert cached > 8000 and cached > 3 * decoded, (cached, decoded)


@pytest.mark.timeout(900)  # a cold ~7.4k-token prefill, then warm steps
def test_opencode_steps_call_tools_and_reuse_the_cache(
    gemma_server: LiveServer, tmp_path: Path
) -> None:
    # a title request (its own small prompt), then the agent's steps: Gemma calls `read`, the
    # file's text goes back, the next step follows
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "notes.txt").write_text("The launch code is 4471.\n")
    events = opencode_session(gemma_server, tmp_path, "Read the file notes.txt.", max_requests=4)
    calls = [e["part"] for e in events if e["type"] == "tool_use"]
    assert calls and all(c["state"]["status"] in ("completed", "error") for c in calls), calls
    steps = [e["part"] for e in events if e["type"] == "step_finish"]
    assert len(steps) >= 2 and steps[0]["reason"] == "tool-calls", steps
    # what opencode itself read from the usage: each step reuses the whole prompt of the step
    # before it (the call the model wrote is decoded again: docs/clients.md)
    for before, after in zip(steps, steps[1:], strict=False):
        prompt = before["tokens"]["input"] + before["tokens"]["cache"]["read"]
        assert after["tokens"]["cache"]["read"] >= prompt - 8, (before, after)


@pytest.fixture(scope="module")
def smol_server() -> Iterator[LiveServer]:
    # aider sends no max_tokens: the server's own default bounds its answers
    with run_server(parallel=2, temperature=0, max_tokens=128) as live:
        yield live


def aider_session(live: LiveServer, tmp: Path, message: str, max_requests: int) -> str:
    """One `aider --message` run on hello.py (no git, no repo map, nothing asked); its output."""
    home, work = project(tmp)
    if not (work / "hello.py").exists():
        (work / "hello.py").write_text('def hello():\n    print("hello")\n')
    command = [str(agent_binary("aider")), "--model", "openai/local"]
    command += ["--openai-api-base", live.v1, "--openai-api-key", "none"]
    command += ["--no-git", "--yes-always", "--no-show-model-warnings", "--no-check-update"]
    command += ["--no-analytics", "--no-show-release-notes", "--map-tokens", "0", "--no-pretty"]
    command += ["--message", message, "hello.py"]
    # litellm's price list comes from GitHub unless told to use its own copy (offline)
    env = {**os.environ, "HOME": str(home), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    env["BROWSER"] = "true"  # a capped answer makes aider open its docs in a browser
    return run_agent(live, command, env, work, max_requests)


def aider_failed(output: str) -> list[str]:
    """What aider prints when a request fails (litellm's exceptions), not a capped answer."""
    signs = ("litellm.", "APIError", "BadRequestError", "APIConnectionError", "Traceback")
    return [line for line in output.splitlines() if any(sign in line for sign in signs)]


@pytest.mark.timeout(900)
def test_aider_streams_answers_and_reuses_its_prompt(
    smol_server: LiveServer, tmp_path: Path
) -> None:
    first = aider_session(smol_server, tmp_path, "Add a docstring to the hello function.", 3)
    assert "Model: openai/local" in first and not aider_failed(first), first
    answer = first.split("Added hello.py to the chat.", 1)[1]
    assert answer.strip(), first  # the streamed answer, printed as it came
    # the next run in the same project sends the same instructions and file: reused; the new
    # message and the edit-format reminder aider puts after it (~220 tokens) are decoded
    second, cached, decoded = reused(
        smol_server,
        lambda: aider_session(smol_server, tmp_path, "Rename hello to greet.", 3),
    )
    assert not aider_failed(second), second
    assert cached > 400 and cached > decoded, (cached, decoded)
