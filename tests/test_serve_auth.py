"""API keys (spec §3, after llama-server's test_security.py): which header carries the key, which
paths are public, the error shape, the SDKs, CORS preflights and websocket handshakes."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from llamactl.server import middleware
from llamactl.server.app import create_app
from serverkit import LiveServer, hermetic_settings, run_server
from starlette.testclient import TestClient, WebSocketDenialResponse
from starlette.websockets import WebSocketDisconnect

from llamactl.config import load_settings
from llamactl.core.errors import ConfigError

MODEL_FIXTURES = {"keyed", "keyed_app"}  # fixtures that load a model: users are slow

HI = [{"role": "user", "content": "Hi"}]
INVALID = "Invalid API Key"
KEY_FILE = "# keys for the team\n\n  # an indented comment\nk3\n"


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """Keys k1,k2 from --api-key and k3 from a key file with comments; metrics on, so that
    /metrics answers 200 once the key is right."""
    key_file = tmp_path_factory.mktemp("keys") / "keys.txt"
    key_file.write_text(KEY_FILE)
    with run_server(api_key=["k1", "k2"], api_key_file=key_file, metrics=True, parallel=2) as live:
        yield live


def routes(model: str) -> list[tuple[str, str, dict[str, Any] | None]]:
    """(method, path, body) for every route family; bodies are cheap (one token)."""
    chat = {"messages": HI, "max_tokens": 1}
    return [
        ("GET", "/v1/models", None),
        ("POST", "/v1/chat/completions", chat),
        ("POST", "/v1/completions", {"prompt": "Hi", "max_tokens": 1}),
        ("POST", "/completions", {"prompt": "Hi", "max_tokens": 1}),
        ("POST", "/completion", {"prompt": "Hi", "n_predict": 1}),
        ("POST", "/tokenize", {"content": "Hi"}),
        ("POST", "/detokenize", {"tokens": [1]}),
        ("POST", "/apply-template", {"messages": HI}),
        ("GET", "/slots", None),
        ("GET", "/props", None),
        ("POST", "/v1/responses", {"input": "Hi", "max_output_tokens": 1}),
        ("POST", "/v1/responses/input_tokens", {"input": "Hi"}),
        ("POST", "/v1/messages", {"model": model, **chat}),
        ("POST", "/v1/messages/count_tokens", {"model": model, "messages": HI}),
        ("GET", "/metrics", None),
    ]


ROUTE_IDS = [f"{m} {p}" for m, p, _ in routes("m")]


def call(live: LiveServer, index: int, headers: dict[str, str] | None = None) -> httpx.Response:
    method, path, body = routes(live.state.model_id)[index]
    return httpx.request(method, live.url + path, json=body, headers=headers, timeout=60)


def assert_refused(r: httpx.Response) -> None:
    assert r.status_code == 401, r.text
    assert r.headers["content-type"] == "application/json; charset=utf-8"
    assert r.headers["x-request-id"]
    if r.url.path.startswith("/v1/messages"):
        assert r.json() == {
            "type": "error",
            "error": {"type": "authentication_error", "message": INVALID},
        }
    else:
        assert r.json() == {
            "error": {"code": 401, "message": INVALID, "type": "authentication_error"}
        }


# ------------------------------------------------------------------------ headers and paths
@pytest.mark.parametrize("index", range(len(ROUTE_IDS)), ids=ROUTE_IDS)
def test_every_route_needs_a_key(keyed: LiveServer, index: int) -> None:
    assert_refused(call(keyed, index))
    assert_refused(call(keyed, index, {"Authorization": "Bearer wrong"}))
    ok = call(keyed, index, {"Authorization": "Bearer k1"})
    assert ok.status_code == 200, ok.text


@pytest.mark.parametrize("path", ["/health", "/v1/health"])
def test_health_is_public(keyed: LiveServer, path: str) -> None:
    r = httpx.get(keyed.url + path, timeout=10)
    assert r.status_code == 200
    assert r.json() == {"status": "ok"}


@pytest.mark.parametrize(
    "headers",
    [
        {"Authorization": "Bearer k2"},  # the second --api-key
        {"Authorization": "Bearer k3"},  # from the key file
        {"Authorization": "k1"},  # a raw key: "Bearer " is optional
        {"Authorization": "bearer k1"},
        {"X-Api-Key": "k1"},  # read only when Authorization is empty
        {"Authorization": "", "X-Api-Key": "k2"},
    ],
    ids=["second-key", "key-file", "raw", "lowercase-bearer", "x-api-key", "empty-auth"],
)
def test_accepted_keys(keyed: LiveServer, headers: dict[str, str]) -> None:
    assert httpx.get(keyed.v1 + "/models", headers=headers, timeout=10).status_code == 200


@pytest.mark.parametrize(
    "headers",
    [
        {"Authorization": "Bearer wrong", "X-Api-Key": "k1"},  # llama-server's quirk
        {"Authorization": "Bearer # keys for the team"},  # comments are not keys
        {"Authorization": "Bearer"},
        {"Authorization": "Bearer k1,k2"},
        {"X-Api-Key": "K1"},
    ],
    ids=["wrong-bearer-good-x-api-key", "comment", "empty", "joined", "case"],
)
def test_refused_keys(keyed: LiveServer, headers: dict[str, str]) -> None:
    assert_refused(httpx.get(keyed.v1 + "/models", headers=headers, timeout=10))


def test_refusal_keeps_the_callers_request_id(keyed: LiveServer) -> None:
    r = httpx.get(keyed.v1 + "/models", headers={"X-Request-Id": "auth-7"}, timeout=10)
    assert r.status_code == 401
    assert r.headers["x-request-id"] == "auth-7"


# ------------------------------------------------------------------------------------ SDKs
def test_openai_sdk(keyed: LiveServer) -> None:
    model = keyed.state.model_id
    client = openai.OpenAI(base_url=keyed.v1, api_key="k2", max_retries=0)
    reply = client.chat.completions.create(model=model, messages=HI, max_tokens=2)
    assert reply.choices[0].message.role == "assistant"
    assert [m.id for m in client.models.list()] == [keyed.state.model_id]

    wrong = openai.OpenAI(base_url=keyed.v1, api_key="nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as err:
        wrong.chat.completions.create(model=model, messages=HI, max_tokens=2)
    assert err.value.status_code == 401
    assert INVALID in str(err.value)


def test_anthropic_sdk(keyed: LiveServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Anthropic SDK sends the key as X-Api-Key (and no Authorization header)."""
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    model = keyed.state.model_id
    client = anthropic.Anthropic(base_url=keyed.url, api_key="k1", max_retries=0)
    message = client.messages.create(model=model, max_tokens=2, messages=HI)
    assert message.role == "assistant"

    wrong = anthropic.Anthropic(base_url=keyed.url, api_key="nope", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as err:
        wrong.messages.create(model=model, max_tokens=2, messages=HI)
    assert err.value.status_code == 401
    assert err.value.body["error"]["type"] == "authentication_error"


# ------------------------------------------------------------------------------------ CORS
PAGE = "http://localhost:5173"  # a local development page: an allowed origin by default


def test_cors_preflight_needs_no_key(keyed: LiveServer) -> None:
    r = httpx.options(
        keyed.v1 + "/chat/completions",
        headers={
            "Origin": PAGE,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type",
        },
        timeout=10,
    )
    assert r.status_code == 200
    assert r.headers["access-control-allow-origin"] == PAGE
    assert r.headers["access-control-allow-credentials"] == "true"
    assert "POST" in r.headers["access-control-allow-methods"]
    assert "authorization" in r.headers["access-control-allow-headers"].lower()


def test_a_browser_can_read_the_refusal(keyed: LiveServer) -> None:
    r = httpx.get(keyed.v1 + "/models", headers={"Origin": PAGE}, timeout=10)
    assert r.status_code == 401
    assert r.headers["access-control-allow-origin"] == PAGE
    assert "x-request-id" in r.headers["access-control-expose-headers"].lower()


def test_a_foreign_origin_is_refused_before_the_key(keyed: LiveServer) -> None:
    """Even with the right key: a page elsewhere may not use the user's browser session."""
    headers = {"Origin": "https://evil.example", "Authorization": "Bearer k1"}
    r = httpx.get(keyed.v1 + "/models", headers=headers, timeout=10)
    assert r.status_code == 403
    assert r.json()["error"]["type"] == "permission_error"


# ------------------------------------------------------------------------ keys in the logs
@pytest.mark.slow
def test_keys_are_never_logged(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """Accepted and refused keys, from the flag and the file, at debug level: none of them
    is printed by the server, uvicorn's access lines included."""
    key_file = tmp_path / "keys.txt"
    key_file.write_text("file-secret-4242\n")
    caplog.set_level("DEBUG")
    with run_server(api_key=["flag-secret-1717"], api_key_file=key_file, parallel=1) as live:
        for key in ("flag-secret-1717", "file-secret-4242", "wrong-secret-9999"):
            httpx.get(live.v1 + "/models", headers={"Authorization": f"Bearer {key}"})
            httpx.get(live.v1 + "/models", headers={"X-Api-Key": key})
        assert "flag-secret-1717" not in repr(live.state.settings)
    out, err = capfd.readouterr()
    logged = out + err + caplog.text
    assert "invalid API key" in caplog.text  # the refusal is logged, without the key
    for key in ("flag-secret-1717", "file-secret-4242", "wrong-secret-9999"):
        assert key not in logged


# ------------------------------------------------------------------------------- websockets
def raw_upgrade(live: LiveServer, path: str) -> str:
    """Send a websocket handshake over a plain socket; return the response's status line.
    (No websocket client library is needed, and none is installed.)"""
    host, port = live.url.removeprefix("http://").split(":")
    request = (
        f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
        "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        "Sec-WebSocket-Version: 13\r\n\r\n"
    )
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request.encode())
        data = b""
        while b"\r\n" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    return data.split(b"\r\n", 1)[0].decode()


@pytest.mark.parametrize("path", ["/v1/realtime", "/anything"])
def test_websocket_handshake_without_key_is_refused(keyed: LiveServer, path: str) -> None:
    status = raw_upgrade(keyed, path)
    assert status.split()[1] in ("401", "403"), status


@pytest.fixture(scope="module")
def keyed_app(tmp_path_factory: pytest.TempPathFactory):
    """The app with keys but no model: the gate runs before any route, so no model is needed
    to see how it treats a websocket handshake (TestClient speaks the ASGI websocket denial
    extension, and reports the denial's status and body)."""
    settings = hermetic_settings({"api_key": ["k1"]})
    return create_app(settings, model_path=Path(tmp_path_factory.mktemp("m")) / "none.gguf")


def test_websocket_denial_is_a_401_response(keyed_app) -> None:
    client = TestClient(keyed_app)
    with (
        pytest.raises(WebSocketDenialResponse) as denied,
        client.websocket_connect("ws://localhost/v1/realtime"),
    ):
        pass
    assert denied.value.status_code == 401
    assert denied.value.headers["x-request-id"]
    assert denied.value.json()["error"]["type"] == "authentication_error"


def test_websocket_with_a_key_passes_the_gate(keyed_app) -> None:
    """With the key the handshake gets past the gate to routing; a path with no websocket
    route then closes the socket: a close, not a 401."""
    client = TestClient(keyed_app)
    connect = client.websocket_connect("ws://localhost/no-such-socket", headers={"X-Api-Key": "k1"})
    with pytest.raises(WebSocketDisconnect), connect as ws:
        ws.receive_text()


def test_a_bad_key_setting_is_reported_without_its_value(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text("api_key = 98765\n")
    with pytest.raises(ConfigError) as err:
        load_settings({}, config_path=config)
    assert "api_key" in str(err.value) and "98765" not in str(err.value)


# ------------------------------------------------------------------------------ unit level
def test_key_matches_compares_against_every_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """No early exit on the first match: the time taken does not tell which key matched. The
    compared values are digests of one length, so it does not tell a key's length either."""
    calls: list[tuple[bytes, bytes]] = []
    real = middleware.hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(middleware.hmac, "compare_digest", counting)
    keys = ["k1", "k2", "a-much-longer-key"]
    assert middleware.key_matches("k1", keys)
    assert len(calls) == 3
    assert {len(a) for a, _ in calls} | {len(b) for _, b in calls} == {32}
    calls.clear()
    assert not middleware.key_matches("nope", keys)
    assert len(calls) == 3
    assert middleware.key_matches("a-much-longer-key", keys)
    assert not middleware.key_matches("k1 ", keys)
    assert not middleware.key_matches("", [])


@pytest.mark.parametrize(
    ("headers", "key"),
    [
        ([(b"authorization", b"Bearer  abc ")], "abc"),
        ([(b"authorization", b"abc")], "abc"),
        ([(b"x-api-key", b"xyz")], "xyz"),
        ([(b"authorization", b"Bearer a"), (b"x-api-key", b"xyz")], "a"),
        ([], ""),
    ],
)
def test_presented_key(headers: list[tuple[bytes, bytes]], key: str) -> None:
    assert middleware.presented_key({"headers": headers}) == key
