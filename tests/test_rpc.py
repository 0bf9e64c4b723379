"""`--rpc`: addresses are checked, and a build without llama.cpp's RPC backend says how to
get one before anything starts (llama-server: "RPC not supported in this build")."""

from __future__ import annotations

import llama_cpp
import pytest
from processkit import run_cli

from llamactl.core.endpoints import check_host_port


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
