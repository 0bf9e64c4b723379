"""`--rpc`: addresses are checked, and a build without llama.cpp's RPC backend says how to
get one before anything starts (llama-server: "RPC not supported in this build")."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import llama_cpp
import pytest
from processkit import run_cli, serve
from serverkit import free_port

from llamactl.core.endpoints import check_host_port

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("good", ["10.0.0.2:50052", "gpu-box.lan:50052", "[fd00::2]:50052"])
def test_host_port(good: str) -> None:
    assert check_host_port(good) == good


@pytest.mark.parametrize("bad", ["10.0.0.2", "host:0", "host:70000", "a b:1", ":50052"])
def test_a_bad_address_is_a_settings_error(bad: str) -> None:
    result = run_cli("serve", "--rpc", f"10.0.0.2:50052,{bad}", "--port", "18097")
    assert result.returncode == 1
    assert f"expected HOST:PORT, got {bad!r}" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.skipif(llama_cpp.llama_supports_rpc(), reason="this build has the RPC backend")
@pytest.mark.parametrize("command", [["serve", "--port", "18098"], ["chat", "hello"]])
def test_a_build_without_rpc_says_how_to_rebuild(command: list[str]) -> None:
    result = run_cli(*command, "--rpc", "127.0.0.1:50052")
    assert result.returncode == 1
    assert 'CMAKE_ARGS="-DGGML_RPC=ON"' in result.stderr
    assert "Traceback" not in result.stderr


# A real rpc-server: opt in with LLAMACTL_TEST_RPC=1 (scripts/rpc_build.py builds llama.cpp with
# the RPC backend once, ~10 min, cached); the run is reported in docs/serve.md's GPUs section.
OPT_IN = os.environ.get("LLAMACTL_TEST_RPC") == "1"
MODEL_FIXTURES = ("rpc_build",)
PROMPTS = ("What is the capital of France?", "Name three colours.", "Count to five.")


@dataclass
class RpcBuild:
    env: dict[str, str]  # makes the installed llama-cpp-python load the RPC build
    rpc_server: str


@dataclass
class RpcServer:
    endpoint: str


@pytest.fixture(scope="module")
def rpc_build() -> RpcBuild:
    if not OPT_IN:
        pytest.skip("a real rpc-server run is opt-in: LLAMACTL_TEST_RPC=1 (builds llama.cpp)")
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts/rpc_build.py")],
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    return RpcBuild(found["env"], found["rpc_server"])


@pytest.fixture
def rpc_server(rpc_build: RpcBuild, tmp_path: Path) -> Iterator[RpcServer]:
    port = free_port()
    log = tmp_path / "rpc-server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [rpc_build.rpc_server, "-H", "127.0.0.1", "-p", str(port), "-t", "1"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 30
        while True:  # listening (its log is block-buffered: it says so only at exit)
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        yield RpcServer(f"127.0.0.1:{port}")
    finally:
        proc.kill()
        proc.wait()


def test_a_chat_through_an_rpc_server_answers_as_the_cpu_does(
    rpc_build: RpcBuild, rpc_server: RpcServer
) -> None:
    """The layers and the KV cache live on the other host's device; greedy text is the CPU's."""
    ask = ("chat", "--temp", "0", "--max-tokens", "24", PROMPTS[0])
    local = run_cli(*ask, env=rpc_build.env, timeout=120)
    remote = run_cli(
        *ask,
        "--rpc",
        rpc_server.endpoint,
        "-ngl",
        "99",
        env={**rpc_build.env, "LLAMACTL_LLAMA_LOG": "1"},
        timeout=120,
    )
    assert local.returncode == 0 and remote.returncode == 0, remote.stderr[-2000:]
    assert remote.stdout == local.stdout and local.stdout.strip()
    assert f"RPC0[{rpc_server.endpoint}] KV buffer size" in remote.stderr  # it ran there


def test_concurrent_streams_through_an_rpc_server_equal_their_solo_answers(
    rpc_build: RpcBuild, rpc_server: RpcServer, tmp_path: Path
) -> None:
    port = free_port()
    flags = ("--rpc", rpc_server.endpoint, "-ngl", "99", "--parallel", "3", "--port", str(port))
    env = {**rpc_build.env, "LLAMACTL_LLAMA_LOG": "1"}
    with serve(tmp_path, *flags, port=port, env=env) as server:
        server.wait_healthy(timeout=180)

        def ask(prompt: str) -> str:
            body = {
                "messages": [{"role": "user", "content": prompt}],
                "temperature": 0,
                "max_tokens": 40,
            }
            reply = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=120)
            assert reply.status_code == 200, reply.text
            return reply.json()["choices"][0]["message"]["content"]

        alone = [ask(p) for p in PROMPTS]
        with ThreadPoolExecutor(len(PROMPTS)) as pool:
            together = list(pool.map(ask, PROMPTS))
        assert together == alone
        assert len(set(alone)) == len(PROMPTS)
    assert f"RPC0[{rpc_server.endpoint}] KV buffer size" in server.stderr


@pytest.mark.parametrize("command", [["serve"], ["chat", "hello"]])
def test_an_rpc_server_that_does_not_answer_is_a_load_error(
    rpc_build: RpcBuild, command: list[str]
) -> None:
    """llama.cpp aborts the process on an endpoint it cannot reach; llamactl says so first."""
    dead = f"127.0.0.1:{free_port()}"
    port = ["--port", str(free_port())] if command == ["serve"] else []
    result = run_cli(*command, *port, "--rpc", dead, env=rpc_build.env, timeout=120)
    assert result.returncode == 1
    assert f"--rpc: cannot reach the rpc-server at {dead}: Connection refused" in result.stderr
    assert "Traceback" not in result.stderr
