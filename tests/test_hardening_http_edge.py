"""The HTTP edge, round 2 (issue 31 rows 5, 11, 14, 17): connections that never finish their
request head, `/health` without a worker thread, JSON bodies parsed off the event loop,
`/tokenize`'s answer bounded and built off it, multipart bodies only on the upload routes.
Through the real server on the embedded model (in this process, or `llamactl serve`)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import resource
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import anyio
import httpx
import pytest
import uvicorn
from fastapi.routing import APIRoute
from llamactl.server.app import create_app
from llamactl.server.edge.body import UPLOAD_PATHS
from llamactl.server.edge.connections import raise_fd_limit
from llamactl.server.prepare import PreparedBodyRoute
from processkit import serve
from serverkit import LiveServer, free_port, hermetic_settings, run_server

MODEL_FIXTURES = {"live"}

HEADER_TIMEOUT = 1.0  # seconds; the module server's --header-timeout
MAX_CONNECTIONS = 24  # the module server's --max-connections
ANSWERS_WITHIN = 10.0  # what "/health keeps answering" means here
T = TypeVar("T")


@pytest.fixture(scope="module")
def live() -> Iterator[LiveServer]:
    with run_server(
        parallel=1,
        header_timeout=HEADER_TIMEOUT,
        max_connections=MAX_CONNECTIONS,
        body_timeout=30.0,
    ) as server:
        yield server


def port_of(live: LiveServer) -> int:
    return int(live.url.rsplit(":", 1)[1])


HEAD_START = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: "


def half_sent(port: int, head: bytes = HEAD_START) -> socket.socket:
    """A connection that has sent part of a request head and then nothing."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(head)
    return sock


def read_all(sock: socket.socket, wait: float = 30.0) -> bytes:
    """What the server sends until it closes the connection (or `wait` seconds pass)."""
    sock.settimeout(wait)
    data = b""
    with contextlib.suppress(TimeoutError, ConnectionResetError):
        while chunk := sock.recv(65536):
            data += chunk
    return data


def is_closed(sock: socket.socket) -> bool:
    """The server has closed this connection (without waiting)."""
    sock.setblocking(False)
    try:
        return sock.recv(65536) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True
    finally:
        sock.setblocking(True)


def status_and_body(data: bytes) -> tuple[int, dict[str, Any]]:
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


class HealthWatch:
    """Polls `/health` on a new connection every 50 ms in a thread, keeping each latency and
    each failure, while the test does something hostile."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.latencies: list[float] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.is_set():
            start = time.monotonic()
            try:
                r = httpx.get(self.url + "/health", timeout=ANSWERS_WITHIN)
                if r.status_code != 200:
                    self.failures.append(f"status {r.status_code}")
            except httpx.HTTPError as exc:
                self.failures.append(repr(exc))
            self.latencies.append(time.monotonic() - start)
            time.sleep(0.05)

    def during(self, action: Callable[[], T]) -> T:
        self._thread.start()
        time.sleep(0.2)
        try:
            return action()
        finally:
            time.sleep(0.2)
            self._stop.set()
            self._thread.join(timeout=3 * ANSWERS_WITHIN)

    def assert_answered(self) -> None:
        assert self.latencies, "no /health request was made"
        assert not self.failures, self.failures[:3]
        assert max(self.latencies) < ANSWERS_WITHIN, f"/health took {max(self.latencies):.1f} s"


# ---------------------------------------------------------------- connections (row 14)
HELD = 1100


@pytest.mark.slow
def test_1100_half_sent_connections_leave_health_answering(tmp_path: Path) -> None:
    """`llamactl serve` started with the usual soft limit of 1024 descriptors: it raises the
    limit, so 1,100 connections that never finish their head leave room for `/health` (before,
    accept() failed with EMFILE and every /health was reset while they were held)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2 * HELD + 512:
        pytest.skip(f"the hard descriptor limit ({hard}) cannot hold {HELD} connections")
    port = free_port()
    args = ("--port", str(port), "--parallel", "1", "--threads", "2")
    with contextlib.ExitStack() as stack:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))  # what `serve` inherits
        try:
            server = stack.enter_context(serve(tmp_path, *args, port=port))
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        raise_fd_limit()  # this process holds the client ends
        server.wait_healthy()
        limits = Path(f"/proc/{server.proc.pid}/limits").read_text()
        row = next(line for line in limits.splitlines() if line.startswith("Max open files"))
        assert row.split()[3] == row.split()[4], row  # soft == hard
        for _ in range(HELD):
            stack.callback(half_sent(port).close)
        watch = HealthWatch(server.url)
        watch.during(lambda: time.sleep(3))
        watch.assert_answered()


def test_a_head_not_sent_in_time_gets_408_and_a_close(live: LiveServer) -> None:
    with half_sent(port_of(live)) as sock:
        start = time.monotonic()
        data = read_all(sock)
    status, body = status_and_body(data)
    assert status == 408
    assert body["error"]["type"] == "timeout_error"
    assert "--header-timeout" in body["error"]["message"]
    assert HEADER_TIMEOUT * 0.9 <= time.monotonic() - start < ANSWERS_WITHIN


def test_a_trickled_head_does_not_extend_its_time(live: LiveServer) -> None:
    """A byte every 0.2 s keeps the connection busy, but the head's time runs from the first."""
    head = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 200
    with socket.create_connection(("127.0.0.1", port_of(live)), timeout=30) as sock:
        start = time.monotonic()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            for byte in head:
                sock.sendall(bytes([byte]))
                time.sleep(0.2)
                if time.monotonic() - start > ANSWERS_WITHIN:
                    break
        data = read_all(sock)
    assert status_and_body(data)[0] == 408
    assert time.monotonic() - start < ANSWERS_WITHIN + 1


def test_a_kept_alive_connection_may_wait_between_requests(live: LiveServer) -> None:
    """Only a head that has begun is timed: an idle kept-alive connection (uvicorn closes it
    after 5 s) is not cut at --header-timeout."""
    request = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port_of(live)), timeout=30) as sock:
        for _ in range(2):
            sock.sendall(request)
            data = b""
            while b'"ok"' not in data:
                chunk = sock.recv(65536)
                assert chunk, "the server closed a kept-alive connection"
                data += chunk
            assert data.startswith(b"HTTP/1.1 200")
            time.sleep(HEADER_TIMEOUT * 1.5)


def test_past_max_connections_the_longest_waiting_one_is_closed(live: LiveServer) -> None:
    port = port_of(live)
    extra = 10
    with contextlib.ExitStack() as stack:
        socks = []
        for _ in range(MAX_CONNECTIONS + extra):
            socks.append(stack.enter_context(half_sent(port)))
            time.sleep(0.005)  # in order of arrival
        watch = HealthWatch(live.url)
        watch.during(lambda: time.sleep(0.3))
        watch.assert_answered()
        time.sleep(0.2)
        closed = [is_closed(s) for s in socks]
        assert all(closed[:extra]), closed  # the oldest made room
        assert not any(closed[-MAX_CONNECTIONS // 2 :]), closed  # the newest are held


def test_when_every_connection_is_busy_health_still_answers(live: LiveServer) -> None:
    """Requests whose bodies never come hold every connection: a new one answers /health
    (headroom), anything else on it gets a 503 naming the limit."""
    port = port_of(live)
    busy = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
    )
    time.sleep(0.5)  # connections of earlier tests are gone
    with contextlib.ExitStack() as stack:
        for _ in range(MAX_CONNECTIONS):
            stack.enter_context(half_sent(port, busy))
        time.sleep(0.3)
        assert httpx.get(live.url + "/health", timeout=ANSWERS_WITHIN).status_code == 200
        refused = httpx.get(live.v1 + "/models", timeout=ANSWERS_WITHIN)
        assert refused.status_code == 503
        assert "--max-connections" in refused.json()["error"]["message"]
        assert refused.headers["connection"] == "close"  # the room is given back at once


def _server_loop(port: int) -> asyncio.AbstractEventLoop:
    """The event loop of the in-process server listening on `port` (other modules' servers may
    be running too)."""
    for obj in gc.get_objects():
        try:  # a weak proxy whose referent is gone raises on isinstance
            found = isinstance(obj, uvicorn.Server)
        except ReferenceError:
            continue
        if found and obj.config.port == port and obj.servers:
            return obj.servers[0].get_loop()
    raise AssertionError(f"no uvicorn server on port {port}")


def test_health_needs_no_worker_thread(live: LiveServer) -> None:
    """Every thread of the server's pool held: /health still answers (a sync route waited)."""
    release = threading.Event()

    def wait() -> None:
        release.wait()

    async def hold_every_thread() -> None:
        limiter = anyio.to_thread.current_default_thread_limiter()
        async with anyio.create_task_group() as group:
            for _ in range(int(limiter.total_tokens)):
                group.start_soon(anyio.to_thread.run_sync, wait)

    held = asyncio.run_coroutine_threadsafe(hold_every_thread(), _server_loop(port_of(live)))
    try:
        time.sleep(0.5)
        r = httpx.get(live.url + "/health", timeout=ANSWERS_WITHIN)
        assert r.status_code == 200
    finally:
        release.set()
        held.result(timeout=30)


# ---------------------------------------------------------- JSON off the loop (row 5)
def test_a_27_mib_lora_body_is_checked_off_the_loop(live: LiveServer) -> None:
    """1.15 M adapter entries: parsed on the event loop they froze every client (16 s of
    /health here); now the helper process counts the values and the answer is a 413."""
    body = json.dumps([{"id": 0, "scale": 1.0}] * 1_150_000).encode()
    watch = HealthWatch(live.url)
    r = watch.during(
        lambda: httpx.post(
            live.url + "/lora-adapters",
            content=body,
            headers={"Content-Type": "application/json"},
            timeout=120,
        )
    )
    assert r.status_code == 413, r.text
    assert "--max-json-values" in r.json()["error"]["message"]
    watch.assert_answered()
    small = httpx.post(live.url + "/lora-adapters", json=[{"id": 0, "scale": 1}], timeout=30)
    assert small.status_code == 400 and "adapter" in small.json()["error"]["message"]


def test_a_slot_action_body_is_checked_off_the_loop(live: LiveServer) -> None:
    """`POST /slots/{id}` takes path and query parameters too: its body is checked and parsed
    in the workers, then FastAPI validates it (it was parsed whole on the loop, any size)."""
    pad = [0] * 12_000_000  # 24 MB, under --max-body-size
    body = json.dumps({"filename": "a.bin", "pad": pad}, separators=(",", ":")).encode()
    url = live.url + "/slots/0?action=save"
    headers = {"Content-Type": "application/json"}
    watch = HealthWatch(live.url)
    r = watch.during(lambda: httpx.post(url, content=body, headers=headers, timeout=120))
    assert r.status_code == 413, r.text
    assert "--max-json-values" in r.json()["error"]["message"]
    watch.assert_answered()
    bad = httpx.post(url, content=b'{"filename": "\\ud800"}', headers=headers, timeout=30)
    assert bad.status_code == 400 and "Invalid JSON" in bad.json()["error"]["message"]
    wrong = httpx.post(url, json={"filename": 5}, timeout=30)
    assert wrong.status_code == 400 and "filename" in wrong.json()["error"]["message"]
    unset = httpx.post(url, json={"filename": "a.bin"}, timeout=30)
    assert unset.status_code == 501  # no --slot-save-path: the route itself still answers


def _routes(routes: list[Any]) -> Iterator[Any]:
    for route in routes:
        included = getattr(route, "original_router", None)  # FastAPI's included router
        if included is not None:
            yield from _routes(included.routes)
        else:
            yield route


def test_every_json_body_is_parsed_off_the_loop() -> None:
    """Each route taking a JSON body model is a PreparedBodyRoute (a new one is caught here).
    Routes that read their body themselves (/tts, the decisions) use `read_json`."""
    app = create_app(hermetic_settings({}))
    loose = []
    for route in _routes(app.router.routes):
        if not isinstance(route, APIRoute):
            continue
        kinds = {type(p.field_info).__name__ for p in route.dependant.body_params}
        if kinds and kinds <= {"Body"} and not isinstance(route, PreparedBodyRoute):
            loose.append(route.path)
    assert not loose, loose


# ----------------------------------------------------------------- /tokenize (row 11)
def test_tokenize_content_is_bounded_by_a_named_limit(live: LiveServer) -> None:
    limit = live.state.settings.max_tokenize_bytes
    r = httpx.post(live.url + "/tokenize", json={"content": "a" * (limit + 1)}, timeout=60)
    assert r.status_code == 400
    message = r.json()["error"]["message"]
    assert "--max-tokenize-bytes" in message and str(limit) in message
    mixed = {"content": ["a" * limit, 1]}
    assert httpx.post(live.url + "/tokenize", json=mixed, timeout=60).status_code == 400


def test_a_tokenize_at_the_limit_leaves_others_answering(live: LiveServer) -> None:
    """The largest content, with pieces: its answer (a dict per token) is built in a worker
    and encoded a chunk at a time, so /health answers throughout."""
    limit = live.state.settings.max_tokenize_bytes
    text = ("hello world, " * (limit // 13 + 1))[:limit]
    watch = HealthWatch(live.url)
    r = watch.during(
        lambda: httpx.post(
            live.url + "/tokenize", json={"content": text, "with_pieces": True}, timeout=300
        )
    )
    assert r.status_code == 200
    watch.assert_answered()
    tokens = r.json()["tokens"]
    plain = httpx.post(live.url + "/tokenize", json={"content": text}, timeout=300).json()
    assert [t["id"] for t in tokens] == plain["tokens"]
    assert "".join(t["piece"] for t in tokens[:4]) == "hello world, hello"
    back = httpx.post(live.url + "/detokenize", json={"tokens": plain["tokens"][:4]}, timeout=60)
    assert back.json() == {"content": "hello world, hello"}


# ----------------------------------------------------------------- multipart (row 17)
def test_multipart_on_chat_is_refused_before_its_body(live: LiveServer) -> None:
    """A 60 MiB multipart body announced to /v1/chat/completions: refused at once, with none
    of it read (it used to be read whole under the 65 MiB upload limit, then refused)."""
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port_of(live)}\r\n"
        "Content-Type: multipart/form-data; boundary=XyZ\r\n"
        f"Content-Length: {60 * 1024 * 1024}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", port_of(live)), timeout=30) as sock:
        sock.sendall(head + b"--XyZ\r\n")
        start = time.monotonic()
        data = read_all(sock)
    status, body = status_and_body(data)
    assert status == 415, data[:200]
    assert "/v1/audio/transcriptions" in body["error"]["message"]
    assert time.monotonic() - start < ANSWERS_WITHIN  # not the 30 s body timeout


def test_a_streamed_multipart_body_is_cut_short(live: LiveServer) -> None:
    """Without a Content-Length: the answer comes before the client has sent it all."""
    sent = 0

    def body() -> Iterator[bytes]:
        nonlocal sent
        yield b'--XyZ\r\nContent-Disposition: form-data; name="file"; filename="a"\r\n\r\n'
        for _ in range(60):
            sent += 1
            yield b"\0" * (1024 * 1024)

    headers = {"Content-Type": "multipart/form-data; boundary=XyZ"}
    try:
        r = httpx.post(live.v1 + "/chat/completions", content=body(), headers=headers, timeout=60)
        assert r.status_code == 415
    except (httpx.WriteError, httpx.RemoteProtocolError, httpx.ReadError):
        pass  # the server answered and closed while the client was still writing
    assert sent < 60


def test_upload_paths_are_the_multipart_routes() -> None:
    """UPLOAD_PATHS (where the body limit admits a form) lists every route whose OpenAPI body
    is multipart, and nothing else."""
    app = create_app(hermetic_settings({}))
    documented = {
        path
        for path, item in app.openapi()["paths"].items()
        for op in item.values()
        if "multipart/form-data" in op.get("requestBody", {}).get("content", {})
    }
    assert documented == {p for p in UPLOAD_PATHS if p in app.openapi()["paths"]}
    assert documented <= UPLOAD_PATHS
