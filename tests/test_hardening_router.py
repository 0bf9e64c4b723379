"""Router faults and hostile clients, with real children on the embedded model (loopback).

A child killed mid-request or mid-stream: its clients get a clean error (a non-streamed
request is never sent to a second child), other models' clients are unaffected, the next
request restarts it. Children answer only the router: each takes a secret of its own, which
is in no command line and no log. Headers a client could use to forge what a child sees are
replaced by the router's.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_router import (
    KEY,
    Router,
    child_auth,
    child_metrics,
    pid_of,
    run_router,
    secret_of,
)
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect as ws_connect

pytestmark = pytest.mark.slow  # the SIGKILL faults are `soak` tests too (CI runs those)

LONG = {"ignore_eos": True, "max_tokens": 300, "messages": [{"role": "user", "content": "Go"}]}


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Router]:
    with run_router(tmp_path_factory.mktemp("hardening"), metrics=True) as live:
        yield live


def wait_until(condition, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.05)


def busy(router: Router, name: str) -> bool:
    """The child is generating (its own count, not the router's)."""
    return child_metrics(router, name)["llamactl:requests_processing"] >= 1


def in_thread(fn) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["result"] = fn()
        except BaseException as e:  # surfaced by the test's assertions
            out["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


# ----------------------------------------------------------------------------- no double runs
@pytest.mark.soak
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
def test_child_killed_mid_request_is_a_502_and_the_request_is_not_sent_again(
    router: Router, path: str
) -> None:
    assert router.chat("small").status_code == 200
    pid = pid_of(router, "small")
    body = {"model": "small", **LONG}
    thread, out = in_thread(lambda: httpx.post(router.url + path, json=body, timeout=60))
    wait_until(lambda: busy(router, "small"), "the child generates")
    os.kill(pid, signal.SIGKILL)
    thread.join(60)
    resp = out["result"]
    assert resp.status_code == 502, resp.text
    if path == "/v1/messages":
        error = resp.json()["error"]
        assert resp.json()["type"] == "error" and error["type"] == "api_error"
    else:
        error = resp.json()["error"]
        assert error["code"] == 502 and error["type"] == "server_error"
    assert error["message"].startswith("model 'small' stopped before answering: killed by SIGKILL")
    # a retry would have started a new child and run the generation again in it
    entry = router.models()["small"]
    assert entry["status"]["value"] == "failed" and "runtime" not in entry
    # the next request starts it again
    assert router.chat("small").status_code == 200
    assert pid_of(router, "small") != pid


# ----------------------------------------------------------------------------- streams
def collect_stream(router: Router, path: str, model: str, events: list[tuple[float, str]]):
    """Read a stream to its end, noting each line's arrival; the read timeout bounds a hang."""
    body = {"model": model, "stream": True, **LONG}
    with httpx.stream("POST", router.url + path, json=body, timeout=30) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line:
                events.append((time.monotonic(), line))


@pytest.mark.soak
def test_sigkill_mid_stream_ends_its_streams_and_spares_other_models(router: Router) -> None:
    assert router.chat("small").status_code == 200 and router.chat("think").status_code == 200
    pid = pid_of(router, "small")
    streams = {
        "openai": ("/v1/chat/completions", "small"),
        "anthropic": ("/v1/messages", "small"),
        "other": ("/v1/chat/completions", "think"),
    }
    events: dict[str, list[tuple[float, str]]] = {key: [] for key in streams}
    threads = {
        key: in_thread(lambda p=p, m=m, k=key: collect_stream(router, p, m, events[k]))
        for key, (p, m) in streams.items()
    }
    wait_until(lambda: all(len(e) >= 3 for e in events.values()), "every stream has begun")
    killed_at = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    for key, (thread, out) in threads.items():
        thread.join(60)
        assert not thread.is_alive(), f"the {key} stream did not end"
        assert "error" not in out, out.get("error")

    openai = [line for _, line in events["openai"]]
    assert openai[-1].startswith("data: ") and "[DONE]" not in openai[-1]
    last = json.loads(openai[-1][6:])
    assert last["error"]["code"] == 502
    assert last["error"]["message"] == "model 'small' stopped mid-answer"
    anthropic = [line for _, line in events["anthropic"]]
    assert anthropic[-2] == "event: error"
    assert json.loads(anthropic[-1][6:])["error"]["type"] == "api_error"
    # the other model's stream went on after the kill and ended normally
    other = events["other"]
    assert other[-1][1] == "data: [DONE]"
    assert not any('"error"' in line for _, line in other)
    assert any(t > killed_at for t, _ in other[:-1])

    resp = router.chat("small")
    assert resp.status_code == 200, resp.text
    assert pid_of(router, "small") != pid


# ----------------------------------------------------------------------------- client leaving
def test_client_leaving_a_non_streamed_request_stops_the_childs_generation(
    router: Router,
) -> None:
    assert router.chat("small").status_code == 200
    before = child_metrics(router, "small")["llamactl:tokens_predicted_total"]
    body = json.dumps({"model": "small", **LONG, "max_tokens": 400}).encode()
    port = int(router.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        wait_until(lambda: busy(router, "small"), "the child generates")
    # the client is gone before any answer: the router closes its connection to the child
    wait_until(
        lambda: not busy(router, "small") and not router.models()["small"]["runtime"]["requests"],
        "the child's slot is free",
    )
    generated = child_metrics(router, "small")["llamactl:tokens_predicted_total"] - before
    assert generated < 400, "the child generated the whole answer for nobody"


# ----------------------------------------------------------------------------- headers
def test_the_child_sees_the_routers_headers_not_the_clients(router: Router) -> None:
    sent = {
        "Authorization": "Bearer client-key",
        "X-Api-Key": "client-key",
        "Origin": "http://localhost:3000",
        "X-Request-Id": "client-chosen-id",
        "Connection": "keep-alive, X-Hop",
        "X-Hop": "dropped",
        "X-Custom": "kept",
    }
    resp = httpx.get(router.url + "/v1/headers?model=small", headers=sent, timeout=60)
    assert resp.status_code == 200, resp.text
    seen = resp.json()
    assert seen["authorization"] == child_auth(router, "small")["Authorization"]
    assert seen["x-request-id"] == resp.headers["x-request-id"]  # the router's own id
    # the client as the router's server sees it (uvicorn believes X-Forwarded-For only
    # from --forwarded-allow-ips), not a list the client started
    assert seen["x-forwarded-for"] == "127.0.0.1" and seen["x-custom"] == "kept"
    for gone in ("x-api-key", "origin", "x-hop"):
        assert gone not in seen


def raw_request(router: Router, request: bytes) -> bytes:
    port = int(router.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        data = b""
        with contextlib.suppress(TimeoutError, ConnectionResetError):
            while chunk := sock.recv(65536):
                data += chunk
                if b"\r\n\r\n" in data:
                    break
        return data


def test_a_header_with_a_nul_is_refused_and_the_router_goes_on(router: Router) -> None:
    """uvicorn's parser refuses it first; the proxy's own check (unit-tested) is for the
    head it writes itself, whatever server it runs under."""
    answer = raw_request(
        router, b"GET /v1/models?model=small HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Bad: a\0b\r\n\r\n"
    )
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
    assert httpx.get(router.url + "/health").status_code == 200


# ----------------------------------------------------------------------------- the secret
def test_children_answer_only_the_router_and_their_secret_is_never_shown(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    auth = {"Authorization": f"Bearer {KEY}"}
    with run_router(tmp_path, api_key=[KEY]) as router:
        assert router.chat("small", headers=auth).status_code == 200
        runtime = router.models(**auth)["small"]["runtime"]
        secret = secret_of(router, "small")
        child = f"http://127.0.0.1:{runtime['port']}"
        body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
        # nothing but the secret opens the child's port: no key, the router's key
        for headers in ({}, auth, {"X-Api-Key": KEY}):
            resp = httpx.post(child + "/v1/chat/completions", json=body, headers=headers)
            assert resp.status_code == 401, headers
        resp = httpx.post(
            child + "/v1/chat/completions", json=body, headers=child_auth(router, "small")
        )
        assert resp.status_code == 200
        with pytest.raises(InvalidStatus) as err:
            ws_connect(child.replace("http://", "ws://") + "/v1/echo")
        assert err.value.response.status_code == 401
        # through the router the websocket reaches the child with the secret
        ws_url = router.url.replace("http://", "ws://") + "/v1/echo?model=small"
        sent = {**auth, "X-Request-Id": "ws-chosen-id", "X-Forwarded-For": "10.1.2.3"}
        with ws_connect(ws_url, additional_headers=sent, origin="http://localhost:3000") as ws:
            ws.send("whoami")
            seen = json.loads(ws.recv(timeout=10))
            request_id = ws.response.headers["x-request-id"]
        assert seen["authorization"] == f"Bearer {secret}"
        assert seen["headers"]["x-request-id"] == request_id  # the router's id
        assert "origin" not in seen["headers"] and "x-api-key" not in seen["headers"]
        assert secret not in httpx.get(router.url + "/models", headers=auth).text
        # not in the child's command line (what `ps` shows)
        with open(f"/proc/{runtime['pid']}/cmdline", "rb") as f:
            assert secret.encode() not in f.read()
        # a restarted child has a new secret
        assert httpx.post(router.url + "/models/unload", json={"model": "small"}, headers=auth)
        assert router.chat("small", headers=auth).status_code == 200
        assert secret_of(router, "small") != secret
    assert secret not in caplog.text and "llamactl.router" in {r.name for r in caplog.records}


def test_a_keyless_routers_children_still_need_their_secret(router: Router) -> None:
    assert router.chat("small").status_code == 200
    port = router.models()["small"]["runtime"]["port"]
    resp = httpx.get(f"http://127.0.0.1:{port}/v1/models")
    assert resp.status_code == 401
    assert httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200  # public, as ever


# ----------------------------------------------------------------------------- squatters
# A launcher standing for a local attacker: in "first" mode it tries to bind the port named in
# the child's command line before the child does (what any process on the machine could do
# in the old gap between the router choosing the port and the child binding it), and if it
# can, answers on it as the attacker would; if it cannot, it runs the real child. In
# "impostor" mode it is a server the router talks to that does not know the secret: on the
# socket it inherited, or the port it was told. Both log every request they get.
SQUATTER = r"""
import errno, json, os, socket, sys

argv = sys.argv[1:]
report = os.environ["ROUTER_TEST_SQUAT_REPORT"]
mode = os.environ["ROUTER_TEST_SQUAT_MODE"]
port = int(argv[argv.index("--port") + 1])

def log(entry):
    with open(report, "a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")

def try_bind(address, reuse):
    sock = socket.socket()
    if reuse:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((address, port))
    except OSError as e:
        sock.close()
        return None, errno.errorcode.get(e.errno, str(e.errno))
    return sock, "bound"

def forge(sock):
    sock.listen(16)
    while True:
        conn, _ = sock.accept()
        with conn:
            data = b""
            while b"\r\n\r\n" not in data and (chunk := conn.recv(65536)):
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            headers = {}
            for line in lines[1:]:
                key, _, value = line.partition(":")
                headers[key.strip().lower()] = value.strip()
            while len(body) < int(headers.get("content-length") or 0):
                body += conn.recv(65536)
            log({"request": lines[0], "headers": headers, "body": body.decode("utf-8", "replace")})
            answer = json.dumps({
                "status": "ok", "proof": "0" * 64, "id": "forged", "object": "chat.completion",
                "model": "small", "created": 0,
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": "FORGED"}}],
            }).encode()
            conn.sendall(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n"
                b"content-length: %d\r\n\r\n" % len(answer) + answer
            )

if mode == "first":
    wildcard, wildcard_result = try_bind("0.0.0.0", True)
    if wildcard is not None:
        wildcard.close()
    sock, result = try_bind("127.0.0.1", True)
    log({"bind": {"0.0.0.0": wildcard_result, "127.0.0.1": result}})
    if sock is not None:
        forge(sock)
    os.execv(sys.executable, [sys.executable, "-m", "llamactl", *argv])
elif "--listen-fd" in argv:
    forge(socket.socket(fileno=int(argv[argv.index("--listen-fd") + 1])))
else:
    sock, result = try_bind("127.0.0.1", True)
    forge(sock)
"""
SQUATTER_LAUNCHER = (sys.executable, "-c", SQUATTER)


def squat_report(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_a_childs_port_is_held_before_the_child_starts_so_no_squatter_can_take_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Old code: the port was free until the child bound it; a process that bound it first
    got the prompt and the child's secret, and its answer reached the client as a 200."""
    report = tmp_path / "squat.jsonl"
    monkeypatch.setenv("ROUTER_TEST_SQUAT_REPORT", str(report))
    monkeypatch.setenv("ROUTER_TEST_SQUAT_MODE", "first")
    with run_router(tmp_path, launcher=SQUATTER_LAUNCHER) as router:
        resp = router.chat("small")
        assert resp.status_code == 200, resp.text
        assert resp.json()["choices"][0]["message"]["content"] != "FORGED"
        pid = pid_of(router, "small")
        port = router.models()["small"]["runtime"]["port"]
        # bound and listening by the router before its child ran a line of code: taken for
        # the wildcard address and the loopback one alike, SO_REUSEADDR or not
        (entry,) = squat_report(report)
        assert entry == {"bind": {"0.0.0.0": "EADDRINUSE", "127.0.0.1": "EADDRINUSE"}}
        # the child serves on the socket it inherited: it bound no port of its own
        with socket.socket() as probe:
            with pytest.raises(OSError) as err:
                probe.bind(("127.0.0.1", port))
            assert err.value.errno == errno.EADDRINUSE
        assert "--listen-fd" in Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    assert not any("request" in e for e in squat_report(report))


def test_the_router_refuses_a_child_that_cannot_prove_its_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server on the child's socket that answers /health but does not know the secret is
    never sent the secret or a prompt: the load fails with the reason. Old code: it got both,
    and its forged answer went back to the client as a 200."""
    report = tmp_path / "impostor.jsonl"
    monkeypatch.setenv("ROUTER_TEST_SQUAT_REPORT", str(report))
    monkeypatch.setenv("ROUTER_TEST_SQUAT_MODE", "impostor")
    with run_router(tmp_path, launcher=SQUATTER_LAUNCHER) as router:
        resp = router.chat("small", messages=[{"role": "user", "content": "my private prompt"}])
        assert resp.status_code == 500, resp.text
        message = resp.json()["error"]["message"]
        assert message.startswith("model 'small' failed to load: the server on port ")
        assert "did not prove it is this router's child (a wrong answer)" in message
        entry = router.models()["small"]
        assert entry["status"]["value"] == "failed" and "runtime" not in entry
    seen = squat_report(report)
    assert [e["request"].split(" ")[:2] for e in seen] == [
        ["GET", "/health"],
        ["GET", "/.llamactl/child-proof"],
    ]
    for e in seen:  # no credential, no body: only the health check and the challenge
        assert not {"authorization", "x-api-key"} & set(e["headers"]) and e["body"] == ""
    assert "private" not in report.read_text(encoding="utf-8")


def test_a_real_child_proves_its_secret_and_clients_cannot_ask_for_the_proof(
    router: Router,
) -> None:
    from llamactl.server.router.proof import PROOF_PATH, proof

    assert router.chat("small").status_code == 200
    port = router.models()["small"]["runtime"]["port"]
    nonce = "ab" * 32
    child = f"http://127.0.0.1:{port}{PROOF_PATH}"
    resp = httpx.get(child, headers={"X-Llamactl-Challenge": nonce})
    assert resp.json() == {"proof": proof(secret_of(router, "small"), port, nonce)}
    assert httpx.get(child).status_code == 400  # no challenge
    # the router does not forward the path: clients get no oracle through it
    resp = httpx.get(
        router.url + PROOF_PATH + "?model=small", headers={"X-Llamactl-Challenge": nonce}
    )
    assert resp.status_code == 404 and "proof" not in resp.json()
    resp = httpx.post(router.url + PROOF_PATH, json={"model": "small"})
    assert resp.status_code == 404 and "proof" not in resp.json()


# ----------------------------------------------------------------------------- large bodies
def test_a_large_body_is_scanned_off_the_loop_and_renamed_in_place(router: Router) -> None:
    assert router.chat("small").status_code == 200
    padding = [{"role": "user", "content": f"filler {i}"} for i in range(300_000)]
    body = json.dumps({"padding": padding, "model": "tiny"}).encode()  # about 12 MB
    url = router.url + "/v1/headers"
    thread, out = in_thread(
        lambda: httpx.post(url, content=body, headers={"content-type": "application/json"})
    )
    slowest = 0.0
    while thread.is_alive():  # the router's loop keeps answering meanwhile
        t0 = time.monotonic()
        assert httpx.get(router.url + "/health", timeout=10).status_code == 200
        slowest = max(slowest, time.monotonic() - t0)
        time.sleep(0.01)
    thread.join()
    resp = out["result"]
    assert resp.status_code == 200, resp.text
    # the alias became the model's name, and nothing else in the body changed
    assert int(resp.json()["content-length"]) == len(body) + len("small") - len("tiny")
    assert slowest < 1.0, f"/health took {slowest:.2f} s while the body was handled"


def test_load_and_unload_bodies_are_small(router: Router) -> None:
    body = {"model": "small", "padding": "x" * 100_000}
    for path in ("/models/load", "/models/unload"):
        resp = httpx.post(router.url + path, json=body, timeout=60)
        assert resp.status_code == 413
        assert resp.json()["error"]["message"] == f"the body of {path} is limited to 64 KiB"


@pytest.mark.soak
def test_sigkill_mid_download_breaks_the_clients_connection(router: Router) -> None:
    """A streamed body that is not SSE (speech) has no error event: cut off, it must not
    look whole, so the router closes the client's connection instead of ending the body."""
    assert router.chat("small").status_code == 200
    pid = pid_of(router, "small")
    body = {"model": "small", "input": "Hello there, how are you today? " * 200, "stream": True}
    received = 0
    with (
        pytest.raises(httpx.TransportError),  # not a clean end of the body
        httpx.stream("POST", router.url + "/tts", json=body, timeout=30) as r,
    ):
        assert r.status_code == 200 and "content-length" not in r.headers
        for chunk in r.iter_bytes():
            if not received:
                os.kill(pid, signal.SIGKILL)
            received += len(chunk)
    assert received > 0
    assert router.chat("small").status_code == 200  # restarted for the next request
