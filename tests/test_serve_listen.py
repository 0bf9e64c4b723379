"""Where and how `llamactl serve` listens, as llama-server's flags ask: several addresses and
UNIX sockets (`--host`), the API under a path (`--api-prefix`), log files and JSON log lines
(`--log-file`, `--log-format`), and clients that stop reading (`--timeout`)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import signal
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from llamactl.server.edge.listen import bind_sockets, display_urls, listen_addresses
from llamactl.server.edge.prefix import normalize_prefix
from llamactl.server.edge.write_timeout import WriteTimeoutMiddleware
from processkit import serve
from serverkit import free_port
from starlette.applications import Starlette
from starlette.responses import StreamingResponse
from starlette.routing import Route

from llamactl import CannotListenError, ConfigError

HI = [{"role": "user", "content": "Hi"}]


def _ipv6_loopback() -> bool:
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET6) as probe:
        probe.bind(("::1", 0))
        return True
    return False


# ------------------------------------------------------------------------------ addresses
def test_host_lists_and_socket_paths():
    assert listen_addresses("127.0.0.1, [::1],/run/x.sock") == ["127.0.0.1", "::1", "/run/x.sock"]
    assert display_urls("127.0.0.1,::1,/tmp/a.sock", 8080) == [
        "http://127.0.0.1:8080",
        "http://[::1]:8080",
        "unix:/tmp/a.sock",
    ]
    with pytest.raises(ConfigError):
        listen_addresses(" , ")
    assert normalize_prefix("llm/") == "/llm" and normalize_prefix("/") == ""
    with pytest.raises(ConfigError):
        normalize_prefix("/a b")


def test_an_address_in_use_or_a_live_socket_is_a_clear_error(tmp_path: Path):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    path = tmp_path / "live.sock"
    live = socket.socket(socket.AF_UNIX)
    live.bind(str(path))
    live.listen()
    try:
        with pytest.raises(CannotListenError, match=f"127.0.0.1 port {port}"):
            bind_sockets(f"{path.parent / 'other.sock'},127.0.0.1", port)
        assert not (path.parent / "other.sock").exists()  # bound first, then given back
        with pytest.raises(CannotListenError, match="another server is listening"):
            bind_sockets(str(path), 0)
        plain = tmp_path / "plain.sock"
        plain.write_text("not a socket")
        with pytest.raises(CannotListenError, match="not a socket"):
            bind_sockets(str(plain), 0)
        assert plain.read_text() == "not a socket"  # never deleted
    finally:
        taken.close()
        live.close()
    stale = bind_sockets(str(path), 0)  # the server is gone: its socket file is reused
    stale[0].close()


# -------------------------------------------------------------------- a real serve process
@pytest.mark.slow
def test_many_addresses_api_prefix_and_json_log_file(tmp_path: Path) -> None:
    port = free_port()
    sock_path = tmp_path / "llamactl.sock"
    hosts = ["127.0.0.1", *(["::1"] if _ipv6_loopback() else []), str(sock_path)]
    log_file = tmp_path / "logs" / "serve.jsonl"
    log_file.parent.mkdir()
    args = ["--host", ",".join(hosts), "--port", str(port), "--api-prefix", "/llm/"]
    args += ["--log-file", str(log_file), "--log-format", "json", "-to", "30", "-np", "2"]
    with serve(tmp_path, *args, port=port) as live:
        live.url += "/llm"
        live.wait_healthy()
        assert "unix:" + str(sock_path) in live.stderr
        base = f"http://127.0.0.1:{port}"
        missing = httpx.get(base + "/health", timeout=10)
        assert missing.status_code == 404
        assert "under /llm/" in missing.json()["error"]["message"]
        body = {"messages": HI, "max_tokens": 3, "temperature": 0}
        answers = []
        for url, transport in [
            (base, None),
            *([(f"http://[::1]:{port}", None)] if "::1" in hosts else []),
            ("http://localhost", httpx.HTTPTransport(uds=str(sock_path))),
        ]:
            with httpx.Client(transport=transport, timeout=60) as client:
                r = client.post(
                    url + "/llm/v1/chat/completions",
                    json=body,
                    headers={"X-Request-Id": f"listen-{len(answers)}"},
                )
                assert r.status_code == 200, r.text
                answers.append(r.json()["choices"][0]["message"]["content"])
                assert client.get(url + "/llm/v1/models").json()["data"]
        assert len(set(answers)) == 1  # one server behind every address
        assert live.stop(signal.SIGTERM) == 0
    assert not sock_path.exists()  # the socket file goes with the server
    records = [json.loads(line) for line in log_file.read_text().splitlines()]
    assert {"time", "level", "request_id", "logger", "message"} <= set(records[0])
    ids = {r["request_id"] for r in records}
    assert {"listen-0", f"listen-{len(answers) - 1}"} <= ids
    assert any("/llm/v1/chat/completions" in r["message"] for r in records)


# ------------------------------------------------------------------------- write timeout
@dataclasses.dataclass
class _Produced:
    chunks: int = 0
    ended: threading.Event = dataclasses.field(default_factory=threading.Event)


@contextlib.contextmanager
def _endless_stream_server(timeout: float) -> Iterator[tuple[int, _Produced]]:
    """A real uvicorn serving an endless stream of 256 KiB chunks behind the write timeout."""
    produced = _Produced()

    async def endless(_request) -> StreamingResponse:
        async def body() -> AsyncIterator[bytes]:
            try:
                while True:
                    produced.chunks += 1
                    yield b"x" * 262144
                    await asyncio.sleep(0)  # a producer waits for its tokens
            finally:
                produced.ended.set()

        return StreamingResponse(body(), media_type="application/octet-stream")

    app = WriteTimeoutMiddleware(Starlette(routes=[Route("/", endless)]), timeout=timeout)
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    try:
        yield port, produced
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def test_a_client_that_stops_reading_is_let_go():
    with _endless_stream_server(timeout=0.5) as (port, produced):
        client = socket.create_connection(("127.0.0.1", port))
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        client.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
        try:
            assert produced.ended.wait(20), "the stalled response was never abandoned"
            written = produced.chunks
            time.sleep(1)
            assert produced.chunks == written  # nothing more is produced for it
        finally:
            client.close()


def test_a_reading_client_is_not_cut_off():
    with _endless_stream_server(timeout=0.5) as (port, produced):
        received = 0
        with httpx.stream("GET", f"http://127.0.0.1:{port}/", timeout=10) as r:
            for chunk in r.iter_bytes():
                received += len(chunk)
                time.sleep(0.001)
                if received > 64 * 262144:
                    break
        assert received > 64 * 262144
