"""The HTTP edge (issue 16): Origin and Host checks, body size and time bounds, request ids,
405s, the websocket frame limit. Through the real server on the embedded model."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import time
from collections.abc import Iterator

import httpx
import pytest
import websockets
from llamactl.server.edge.hosts import HostPolicy, is_loopback_bind
from llamactl.server.edge.loopback import split_authority
from llamactl.server.edge.origins import OriginPolicy, normalize_origin
from llamactl.server.router import create_router_app
from serverkit import LiveServer, hermetic_settings, run_server, serve_app

from llamactl.core.errors import ConfigError

MODEL_FIXTURES = {"edge", "open_server"}  # fixtures that load a model: users are slow

CHAT = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}
EVIL = "https://evil.example"
BODY_TIMEOUT = 1.0  # seconds; the edge server's --body-timeout


@pytest.fixture(scope="module")
def edge() -> Iterator[LiveServer]:
    """Default origins and hosts; a 1 MiB body limit and a 1 s body timeout."""
    with run_server(parallel=1, max_body_size=1, body_timeout=BODY_TIMEOUT) as live:
        yield live


@pytest.fixture(scope="module")
def open_server() -> Iterator[LiveServer]:
    """`--cors-origins '*' --allowed-hosts rebound.example`."""
    with run_server(parallel=1, cors_origins=["*"], allowed_hosts=["rebound.example"]) as live:
        yield live


def port_of(live: LiveServer) -> int:
    return int(live.url.rsplit(":", 1)[1])


def raw_exchange(live: LiveServer, head: str, body: bytes = b"", wait: float = 30) -> bytes:
    """Send `head` (and `body`) on a plain socket; return what comes back until the server
    closes the connection or `wait` seconds pass."""
    with socket.create_connection(("127.0.0.1", port_of(live)), timeout=wait) as sock:
        sock.sendall(head.encode("latin-1") + body)
        data = b""
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                break
            data += chunk
            if b"\r\n\r\n" in data and _complete(data):
                break
    return data


def _complete(data: bytes) -> bool:
    head, _, body = data.partition(b"\r\n\r\n")
    match = re.search(rb"(?i)content-length: *(\d+)", head)
    return match is not None and len(body) >= int(match.group(1))


def parse(data: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(lines[0].split()[1]), headers, body


# ----------------------------------------------------------------------------------- CORS
@pytest.mark.parametrize("ctype", ["text/plain", "application/x-www-form-urlencoded"])
def test_a_cross_site_simple_post_is_refused(edge: LiveServer, ctype: str) -> None:
    """The POST a page can send without a preflight never reaches the model."""
    r = httpx.post(
        edge.v1 + "/chat/completions",
        content=json.dumps(CHAT),
        headers={"Origin": EVIL, "Content-Type": ctype},
        timeout=30,
    )
    assert r.status_code == 403, r.text
    error = r.json()["error"]
    assert error["type"] == "permission_error" and error["code"] == 403
    assert EVIL in error["message"] and "--cors-origins" in error["message"]
    assert "access-control-allow-origin" not in r.headers
    assert r.headers["x-request-id"]


def test_anthropic_refusal_has_anthropic_shape(edge: LiveServer) -> None:
    r = httpx.post(edge.v1 + "/messages", json=CHAT, headers={"Origin": EVIL}, timeout=30)
    assert r.status_code == 403
    assert r.json()["type"] == "error"
    assert r.json()["error"]["type"] == "permission_error"


def test_a_disallowed_preflight_gets_no_allow_headers(edge: LiveServer) -> None:
    r = httpx.options(
        edge.v1 + "/chat/completions",
        headers={"Origin": EVIL, "Access-Control-Request-Method": "POST"},
        timeout=10,
    )
    assert r.status_code == 403
    assert not [h for h in r.headers if h.startswith("access-control-")]


@pytest.mark.parametrize(
    "origin",
    [
        "http://localhost:3000",
        "https://localhost",
        "http://127.0.0.1:5173",
        "http://127.1.2.3:8000",
        "http://[::1]:8080",
    ],
)
def test_localhost_origins_are_allowed_with_cors_headers(edge: LiveServer, origin: str) -> None:
    r = httpx.post(edge.v1 + "/chat/completions", json=CHAT, headers={"Origin": origin}, timeout=60)
    assert r.status_code == 200, r.text
    assert r.headers["access-control-allow-origin"] == origin
    assert r.headers["access-control-allow-credentials"] == "true"
    assert "Origin" in r.headers["vary"]
    pre = httpx.options(
        edge.v1 + "/chat/completions",
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type, authorization",
        },
        timeout=10,
    )
    assert pre.status_code == 200
    assert pre.headers["access-control-allow-origin"] == origin
    assert "POST" in pre.headers["access-control-allow-methods"]
    assert "authorization" in pre.headers["access-control-allow-headers"]


@pytest.mark.parametrize(
    "origin",
    [
        "null",
        "http://localhost.evil.example",
        "http://notlocalhost",
        "http://127.0.0.1.evil.example",
        "http://10.0.0.1",
        "file://",
        "garbage",
    ],
)
def test_lookalike_and_opaque_origins_are_refused(edge: LiveServer, origin: str) -> None:
    r = httpx.get(edge.v1 + "/models", headers={"Origin": origin}, timeout=10)
    assert r.status_code == 403, origin


def test_same_origin_is_allowed(edge: LiveServer) -> None:
    """The server's own pages (Swagger UI at /docs) send their origin on POSTs."""
    r = httpx.get(edge.v1 + "/models", headers={"Origin": edge.url}, timeout=10)
    assert r.status_code == 200
    assert r.headers["access-control-allow-origin"] == edge.url


def test_curl_without_a_content_type_still_works(edge: LiveServer) -> None:
    """curl sends no Origin; its form content type is still read as JSON."""
    r = httpx.post(
        edge.v1 + "/chat/completions",
        content=json.dumps(CHAT),
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    assert "access-control-allow-origin" not in r.headers


@pytest.mark.slow
def test_a_listed_public_origin_may_reach_the_local_server() -> None:
    """An exact --cors-origins entry, with Chrome's Private Network Access preflight."""
    with run_server(parallel=1, cors_origins=["https://app.example.com"]) as live:
        pre = httpx.options(
            live.v1 + "/chat/completions",
            headers={
                "Origin": "https://app.example.com",
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Private-Network": "true",
            },
            timeout=10,
        )
        assert pre.status_code == 200
        assert pre.headers["access-control-allow-private-network"] == "true"
        local = httpx.get(live.v1 + "/models", headers={"Origin": "http://localhost:3000"})
        assert local.status_code == 403  # localhost was not listed this time


def test_star_allows_every_origin(open_server: LiveServer) -> None:
    for origin in (EVIL, "null"):
        r = httpx.post(
            open_server.v1 + "/chat/completions",
            json=CHAT,
            headers={"Origin": origin},
            timeout=60,
        )
        assert r.status_code == 200, r.text
        assert r.headers["access-control-allow-origin"] == origin


def test_a_websocket_from_a_foreign_origin_is_refused(edge: LiveServer) -> None:
    """Browsers apply no CORS to websockets: the Origin check is the only guard."""
    head = (
        f"GET /v1/realtime HTTP/1.1\r\nHost: 127.0.0.1:{port_of(edge)}\r\nOrigin: {EVIL}\r\n"
        "Upgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    status, _, _ = parse(raw_exchange(edge, head, wait=10))
    assert status == 403


# ------------------------------------------------------------------------- Host (rebinding)
def host_request(live: LiveServer, host: str, path: str = "/v1/models") -> int:
    head = f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    return parse(raw_exchange(live, head, wait=10))[0]


@pytest.mark.parametrize("path", ["/v1/models", "/health"])
def test_a_rebinding_host_is_refused(edge: LiveServer, path: str) -> None:
    port = port_of(edge)
    assert host_request(edge, f"rebound.example:{port}", path) == 403
    assert host_request(edge, "rebound.example", path) == 403
    head = f"GET {path} HTTP/1.1\r\nHost: rebound.example:{port}\r\nConnection: close\r\n\r\n"
    status, headers, body = parse(raw_exchange(edge, head, wait=10))
    error = json.loads(body)["error"]
    assert error["type"] == "permission_error"
    assert "rebound.example" in error["message"] and "--allowed-hosts" in error["message"]
    assert headers["x-request-id"]


@pytest.mark.parametrize("name", ["localhost", "127.0.0.1", "127.9.9.9", "[::1]", "LOCALHOST"])
def test_loopback_hosts_are_answered(edge: LiveServer, name: str) -> None:
    assert host_request(edge, f"{name}:{port_of(edge)}") == 200
    assert host_request(edge, name) == 200


def test_allowed_hosts_admits_a_name(open_server: LiveServer) -> None:
    port = port_of(open_server)
    assert host_request(open_server, f"rebound.example:{port}") == 200
    assert host_request(open_server, f"other.example:{port}") == 403


@pytest.mark.slow
def test_loopback_arrivals_are_checked_on_a_wildcard_bind() -> None:
    """--host 0.0.0.0: a rebinding page's connection still arrives on 127.0.0.1."""
    with run_server(parallel=1, host="0.0.0.0") as live:
        assert host_request(live, f"rebound.example:{port_of(live)}") == 403
        assert host_request(live, f"localhost:{port_of(live)}") == 200


def test_a_websocket_with_a_rebinding_host_is_refused(edge: LiveServer) -> None:
    head = (
        f"GET /v1/realtime HTTP/1.1\r\nHost: rebound.example:{port_of(edge)}\r\n"
        "Upgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    assert parse(raw_exchange(edge, head, wait=10))[0] == 403


# --------------------------------------------------------------------------- body bounds
def test_a_huge_content_length_is_refused_without_reading_the_body(edge: LiveServer) -> None:
    """10 GB announced, 10 bytes sent: the 413 comes at once, the body is never waited for."""
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port_of(edge)}\r\n"
        "Content-Type: application/json\r\nContent-Length: 10000000000\r\n\r\n"
    )
    status, headers, body = parse(raw_exchange(edge, head, b'{"messages"', wait=30))
    assert status == 413  # had the server waited for the body, this would be the 408
    error = json.loads(body)["error"]
    assert error["type"] == "request_too_large_error"
    assert "1 MiB" in error["message"] and "--max-body-size" in error["message"]
    assert headers.get("connection") == "close"


def test_anthropic_413_has_anthropic_shape(edge: LiveServer) -> None:
    r = httpx.post(edge.v1 + "/messages", content=b"x" * (2 * 1024 * 1024), timeout=30)
    assert r.status_code == 413
    assert r.json()["error"]["type"] == "request_too_large"


def test_a_chunked_body_is_counted_as_it_arrives(edge: LiveServer) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(40):
            yield b" " * 65536  # 2.5 MiB in all, no Content-Length

    r = httpx.post(edge.v1 + "/chat/completions", content=chunks(), timeout=30)
    assert r.status_code == 413


def test_a_body_under_the_limit_is_served(edge: LiveServer) -> None:
    padded = {**CHAT, "user": "x" * (512 * 1024)}
    r = httpx.post(edge.v1 + "/chat/completions", json=padded, timeout=60)
    assert r.status_code == 200, r.text


def test_uploads_may_reach_the_audio_limit(edge: LiveServer) -> None:
    """A 3 MiB multipart upload passes the 1 MiB body limit (the audio route judges it)."""
    files = {"file": ("a.wav", b"\0" * (3 * 1024 * 1024), "audio/wav")}
    r = httpx.post(edge.v1 + "/audio/transcriptions", files=files, timeout=120)
    assert r.status_code != 413, r.text
    files = {"file": ("a.wav", b"\0" * (66 * 1024 * 1024), "audio/wav")}
    r = httpx.post(edge.v1 + "/audio/transcriptions", files=files, timeout=120)
    assert r.status_code == 413
    assert "65 MiB" in r.json()["error"]["message"]


def test_a_slow_body_gets_408(edge: LiveServer) -> None:
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port_of(edge)}\r\n"
        "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
    )
    status, headers, body = parse(raw_exchange(edge, head, b'{"messages": [', wait=60))
    assert status == 408
    error = json.loads(body)["error"]
    assert error["type"] == "timeout_error" and "--body-timeout" in error["message"]
    assert headers.get("connection") == "close"


def test_oversized_headers_are_refused(edge: LiveServer) -> None:
    """The request line and headers are bounded (64 KiB): 1 MiB of them is not buffered."""
    pad = "".join(f"X-Pad-{i}: {'a' * 1000}\r\n" for i in range(1024))
    head = f"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n{pad}\r\n"
    try:
        data = raw_exchange(edge, head, wait=30)
    except (ConnectionResetError, BrokenPipeError):
        return  # closed while we were still sending
    assert not data or parse(data)[0] in (400, 431)


# ------------------------------------------------------------------------ small things
@pytest.mark.parametrize(
    "given",
    ["a b", "x" * 129, "<script>", "id\x01", "a\tb", "é", "%0d%0a"],
    ids=["space", "long", "markup", "control", "tab", "non-ascii", "percent"],
)
def test_an_unsafe_request_id_is_replaced(edge: LiveServer, given: str) -> None:
    head = (
        f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{port_of(edge)}\r\n"
        f"X-Request-Id: {given}\r\nConnection: close\r\n\r\n"
    )
    status, headers, _ = parse(raw_exchange(edge, head, wait=10))
    if status == 400:  # the HTTP parser itself refused the header: it never reached us
        return
    assert status == 200
    assert re.fullmatch(r"[0-9a-f]{32}", headers["x-request-id"]), headers["x-request-id"]


def test_a_safe_request_id_is_kept(edge: LiveServer) -> None:
    given = "trace-1.2:span/3+x=y@z_" + "0" * 100
    r = httpx.get(edge.url + "/health", headers={"X-Request-Id": given}, timeout=10)
    assert r.headers["x-request-id"] == given


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("POST", "/v1/models", {"GET"}),
        ("GET", "/v1/chat/completions", {"POST"}),
        ("PUT", "/v1/responses/resp_1", {"GET", "DELETE"}),
    ],
)
def test_405_says_what_is_allowed(
    edge: LiveServer, method: str, path: str, allowed: set[str]
) -> None:
    r = httpx.request(method, edge.url + path, timeout=10)
    assert r.status_code == 405
    assert {m.strip() for m in r.headers["allow"].split(",")} == allowed
    assert r.json()["error"]["type"] == "invalid_request_error"


# --------------------------------------------------------------------------- websockets
def test_a_20_mib_realtime_frame_is_not_refused_for_size(edge: LiveServer) -> None:
    """The documented 15 MiB append is about 20 MiB on the wire: the frame reaches the
    session, which answers it (here: an unknown event type) and keeps the socket open."""
    url = edge.url.replace("http://", "ws://") + "/v1/realtime?intent=transcription"
    frame = json.dumps({"type": "no.such.event", "pad": "A" * (20 * 1024 * 1024)})

    async def exchange() -> list[dict]:
        async with websockets.connect(url, max_size=None, open_timeout=60) as ws:
            await ws.send(frame)
            await ws.send(json.dumps({"type": "no.such.event.either"}))
            events: list[dict] = []
            while len([e for e in events if e["type"] == "error"]) < 2:
                events.append(json.loads(await asyncio.wait_for(ws.recv(), 120)))
            return events

    errors = [e for e in asyncio.run(exchange()) if e["type"] == "error"]
    assert all(e["error"].get("code") != "event_too_big" for e in errors), errors


# ---------------------------------------------------------------------------------- router
def test_the_router_has_the_same_edge(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The router installs the same layers: its own routes are guarded before any child."""
    settings = hermetic_settings({"max_body_size": 1})
    app = create_router_app(settings, models_dir=tmp_path_factory.mktemp("no_models"))
    with serve_app(app, settings) as router:
        port = port_of(router)
        r = httpx.get(router.v1 + "/models", headers={"Origin": EVIL}, timeout=10)
        assert r.status_code == 403 and r.json()["error"]["type"] == "permission_error"
        ok = httpx.get(router.v1 + "/models", headers={"Origin": "http://localhost:3000"})
        assert ok.status_code == 200
        assert ok.headers["access-control-allow-origin"] == "http://localhost:3000"
        assert host_request(router, f"rebound.example:{port}") == 403
        big = httpx.post(router.v1 + "/chat/completions", content=b"x" * (2 * 1024 * 1024))
        assert big.status_code == 413
        assert re.fullmatch(r"[0-9a-f]{32}", big.headers["x-request-id"])


# ------------------------------------------------------------------------------ policies
def test_origin_policy_entries_are_checked() -> None:
    with pytest.raises(ConfigError, match="cors_origins"):
        OriginPolicy(["example.com"])
    policy = OriginPolicy(["https://App.Example.com:443"])
    assert policy.allows("https://app.example.com", "127.0.0.1:8080")
    assert not policy.allows("http://app.example.com", "127.0.0.1:8080")
    assert not policy.allows("http://localhost:3000", "127.0.0.1:8080")  # not listed
    assert normalize_origin("HTTP://[::1]:80") == "http://[::1]"


def test_host_policy() -> None:
    assert is_loopback_bind("127.0.0.1") and is_loopback_bind("::1")
    assert is_loopback_bind("localhost") and not is_loopback_bind("0.0.0.0")
    open_bind = HostPolicy("0.0.0.0", [])
    assert open_bind.allows("box.lan:8080", "192.168.1.5")  # documented: no list, no check
    assert not open_bind.allows("evil.example", "127.0.0.1")  # ...but loopback arrivals are
    assert open_bind.allows("localhost:8080", "127.0.0.1")
    lan = HostPolicy("0.0.0.0", ["box.lan"])
    assert lan.allows("box.lan:8080", "192.168.1.5") and lan.allows("localhost", "10.0.0.2")
    assert not lan.allows("evil", "192.168.1.5")
    assert HostPolicy("127.0.0.1", ["*"]).allows("evil", "127.0.0.1")
    with pytest.raises(ConfigError, match="allowed_hosts"):
        HostPolicy("127.0.0.1", ["bad host:x"])
    assert split_authority("[::1]:8080") == ("::1", 8080)
    assert split_authority("::1") is None
