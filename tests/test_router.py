"""Router mode end to end: a router in this process, real `llamactl serve` children.

The models are the embedded SmolLM2 under two names with different settings (a preset), and a
tiny decision model converted by the project's converter, found in --models-dir in a
subdirectory of its own with its projector (llama-server's layout). Children are started
through a launcher that adds a websocket echo route to the normal app, so websocket proxying
is tested apart from the real `/v1/realtime` route (which has its own test).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from audiokit import SENTENCES, heard, speech, to_rate
from llamactl.converters import convert
from llamactl.server.router import create_router_app
from serverkit import THINK_TEMPLATE, free_port, hermetic_settings
from synthetic_checkpoints import cached
from test_decision_engine import png_url
from typer.testing import CliRunner
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect as ws_connect

from llamactl.cli.main import app as cli_app
from llamactl.models import embedded_model_path

pytestmark = pytest.mark.slow

EMBEDDED = embedded_model_path()

# A child: the normal `llamactl serve`, plus /v1/echo (websocket) that echoes frames, answers
# "whoami" with what it was asked for, and closes with the code in "close:<code>", and
# /v1/headers (HTTP) that answers the headers it got.
ECHO_CHILD = """
import json, sys
import llamactl.server.app as server_app
from starlette.requests import Request
from starlette.websockets import WebSocket

_create_app = server_app.create_app

async def echo(ws: WebSocket):
    await ws.accept()
    while True:
        msg = await ws.receive()
        if msg["type"] == "websocket.disconnect":
            return
        text = msg.get("text")
        if text == "whoami":
            await ws.send_text(json.dumps({
                "model": ws.query_params.get("model"),
                "authorization": ws.headers.get("authorization"),
                "headers": dict(ws.headers),
            }))
        elif text is not None and text.startswith("close:"):
            await ws.close(int(text[6:]), reason="asked to")
            return
        elif text is not None:
            await ws.send_text(text)
        else:
            await ws.send_bytes(msg["bytes"])

async def headers(request: Request):
    return dict(request.headers)

def create_app(*args, **kwargs):
    app = _create_app(*args, **kwargs)
    app.add_api_websocket_route("/v1/echo", echo)
    app.add_api_route("/v1/headers", headers, methods=["GET", "POST"])
    return app

server_app.create_app = create_app
from llamactl.cli.main import run
sys.argv[0] = "llamactl"
run()
"""
LAUNCHER = (sys.executable, "-c", ECHO_CHILD)
KEY = "router-secret"


def write_preset(directory: Path, extra: str = "") -> Path:
    path = directory / "models.toml"
    path.write_text(
        f"""
[small]
model = "{EMBEDDED}"
aliases = ["tiny"]
ctx_size = 1024
parallel = 2

[think]
model = "{EMBEDDED}"
parallel = 1
chat_template_file = "{THINK_TEMPLATE}"
{extra}
""",
        encoding="utf-8",
    )
    return path


class Router:
    def __init__(self, url: str, app: Any) -> None:
        self.url = url
        self.app = app

    def models(self, **headers: str) -> dict[str, dict[str, Any]]:
        data = httpx.get(self.url + "/models", headers=headers).json()["data"]
        return {m["id"]: m for m in data}

    def status(self, name: str) -> str:
        return self.models()[name]["status"]["value"]

    def wait_status(self, name: str, value: str, timeout: float = 20) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            entry = self.models()[name]
            if entry["status"]["value"] == value:
                return entry
            if time.monotonic() > deadline:
                raise AssertionError(f"{name} is {entry['status']}, not {value}")
            time.sleep(0.05)

    def chat(self, model: str | None, path: str = "/v1/chat/completions", **kw) -> httpx.Response:
        body: dict[str, Any] = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
        if model is not None:
            body["model"] = model
        headers = kw.pop("headers", {})
        return httpx.post(self.url + path, json=body | kw, headers=headers, timeout=60)


@contextlib.contextmanager
def run_router(
    tmp: Path,
    preset_extra: str = "",
    models_dir: Path | None = None,
    launcher: tuple[str, ...] = LAUNCHER,
    **overrides: Any,
) -> Iterator[Router]:
    overrides.setdefault("threads", 1)
    overrides["models_preset"] = str(write_preset(tmp, preset_extra))
    settings = hermetic_settings(overrides)
    app = create_router_app(settings, models_dir=models_dir, launcher=launcher, load_timeout=60)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                break
        if time.monotonic() > deadline or not thread.is_alive():
            server.should_exit = True
            raise RuntimeError("router did not start")
        time.sleep(0.05)
    try:
        yield Router(url, app)
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def decision_models_dir(factory: pytest.TempPathFactory) -> Path:
    """models/jev/openjev.gguf with its projector under llama-server's name for it."""
    models = factory.mktemp("router_models")
    (models / "jev").mkdir()
    openjev = cached(factory, "openjev")
    convert(openjev, models / "jev" / "openjev.gguf")
    made = convert(openjev, models / "jev" / "openjev.gguf", mmproj=True).outfile
    made.rename(models / "jev" / "mmproj-F16.gguf")  # not the name the model's loader seeks
    return models


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Router]:
    models = decision_models_dir(tmp_path_factory)
    broken = f"""
[broken]
model = "no-such-model.gguf"

[badtemplate]
model = "{EMBEDDED}"
chat_template_file = "missing.jinja"
"""
    tmp = tmp_path_factory.mktemp("router")
    with run_router(tmp, broken, models, models_max=2, metrics=True) as live:
        yield live


def wait_gone(pid: int, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        assert time.monotonic() < deadline, f"process {pid} still runs"
        time.sleep(0.05)


def pid_of(router: Router, name: str) -> int:
    return router.models()[name]["runtime"]["pid"]


def secret_of(router: Router, name: str) -> str:
    """The key the model's child requires: known to the router only (and to tests)."""
    child = router.app.state.llamactl.manager.states[name].child
    assert child is not None, f"{name} is not loaded"
    return child.secret


def child_auth(router: Router, name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret_of(router, name)}"}


# ----------------------------------------------------------------------------- listing
def test_lists_every_model_with_status_and_capabilities(router: Router) -> None:
    data = httpx.get(router.url + "/v1/models").json()
    assert data["object"] == "list"
    models = {m["id"]: m for m in data["data"]}
    assert list(models) == ["small", "think", "broken", "badtemplate", "jev/openjev"]
    small = models["small"]
    assert small["aliases"] == ["tiny"]
    assert small["status"]["value"] in ("unloaded", "loading", "loaded")
    assert small["architecture"] == {"input_modalities": ["text"], "output_modalities": ["text"]}
    assert small["capabilities"] == ["text", "audio_in", "audio_out"]
    assert "capabilities" not in small["meta"]
    # the decision model, with the projector found beside it in its own subdirectory
    jev = models["jev/openjev"]
    assert jev["aliases"] == ["jev"] and jev["meta"]["source"] == "models-dir"
    assert jev["architecture"] == {
        "input_modalities": ["text", "image"],
        "output_modalities": ["decisions"],
    }
    assert jev["capabilities"] == ["decisions", "image_in"]
    assert "capabilities" not in jev["meta"]  # one vocabulary: the top-level list
    assert small["meta"]["path"] == str(EMBEDDED)
    assert models["broken"]["meta"]["path"] is None
    assert [m["id"] for m in httpx.get(router.url + "/models").json()["data"]] == list(models)


# ----------------------------------------------------------------------------- routing
def test_routes_by_model_and_alias_to_children_with_their_own_settings(router: Router) -> None:
    for name in ("small", "tiny", "think"):
        resp = router.chat(name)
        assert resp.status_code == 200, resp.text
        assert resp.json()["model"] == ("small" if name == "tiny" else name)
    models = router.models()
    small, think = models["small"]["runtime"], models["think"]["runtime"]
    assert small["pid"] != think["pid"]
    assert (small["slots_total"], think["slots_total"]) == (2, 1)
    assert small["memory_bytes"] > 50_000_000  # the 98 MB model is mapped in
    # each child really runs its preset: 1024 positions over 2 slots for "small" (one cell of
    # each held back for the engine's companion rows)
    direct = httpx.get(
        f"http://127.0.0.1:{small['port']}/v1/models", headers=child_auth(router, "small")
    ).json()["data"][0]
    assert direct["id"] == "small" and direct["meta"]["n_ctx_slot"] == 511


def test_anthropic_and_get_routes_are_proxied(router: Router) -> None:
    resp = httpx.post(
        router.url + "/v1/messages",
        json={"model": "tiny", "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]},
        timeout=60,
    )
    assert resp.status_code == 200, resp.text
    assert resp.json()["type"] == "message"
    # a GET names its model in the query; the child's own 404 comes back unchanged
    resp = httpx.get(router.url + "/no/such/route?model=small")
    assert resp.status_code == 404
    assert resp.json()["error"]["message"] == "File Not Found: /no/such/route"


def test_error_messages_for_missing_and_unknown_models(router: Router) -> None:
    resp = router.chat(None)
    assert resp.status_code == 400
    assert resp.json() == {
        "error": {
            "code": 400,
            "message": "model name is missing from the request",
            "type": "invalid_request_error",
        }
    }
    resp = router.chat("nope")
    assert resp.status_code == 400
    assert resp.json()["error"]["message"] == "model 'nope' not found"
    # Anthropic routes answer in Anthropic's shape
    resp = router.chat("nope", path="/v1/messages")
    assert resp.json() == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "model 'nope' not found"},
    }
    resp = httpx.get(router.url + "/props")
    assert resp.json()["error"]["message"] == "model name is missing from the request"


def test_failed_loads_are_reported_with_their_reason(router: Router) -> None:
    resp = router.chat("broken")
    assert resp.status_code == 500
    assert (
        "model 'broken' failed to load: model 'no-such-model.gguf' was not found"
        in (resp.json()["error"]["message"])
    )
    resp = router.chat("badtemplate")  # the child starts, its model fails to load
    assert resp.status_code == 500
    message = resp.json()["error"]["message"]
    assert message.startswith("model 'badtemplate' failed to load:") and "missing.jinja" in message
    status = router.models()["badtemplate"]["status"]
    assert status["value"] == "failed" and "missing.jinja" in status["message"]


def test_decisions_are_routed_to_the_decision_model(router: Router) -> None:
    body = {
        "model": "jev",
        "state": "I was charged twice",
        "questions": {
            "team": {
                "type": "choice",
                "instructions": "Which team?",
                "criteria": {"billing": "Payments", "shipping": None},
            },
            "angry": {"type": "noul", "instructions": "Is the customer angry?"},
        },
    }
    resp = httpx.post(router.url + "/v1/systemone", json=body, timeout=60)
    assert resp.status_code == 200, resp.text
    got = resp.json()
    assert got["model"] == "jev/openjev"  # the alias reached the child as the model's name
    assert list(got["answers"]) == ["team", "angry"]
    assert sum(got["answers"]["team"]["probabilities"].values()) == pytest.approx(1, abs=1e-4)
    # the paired projector is loaded in the child: an image adds input tokens
    with_image = httpx.post(
        router.url + "/v1/systemone", json={**body, "images": [png_url()]}, timeout=60
    )
    assert with_image.status_code == 200, with_image.text
    assert with_image.json()["usage"]["input_tokens"] > got["usage"]["input_tokens"]
    # a decision model's child refuses to generate text; a chat model's refuses decisions
    resp = router.chat("jev")
    assert resp.status_code == 501 and "/v1/systemone" in resp.json()["error"]["message"]
    resp = httpx.post(router.url + "/v1/systemone", json={**body, "model": "tiny"}, timeout=60)
    assert resp.status_code == 501
    assert resp.json()["error"]["message"] == "This model is not a decision model"


# ----------------------------------------------------------------------------- load / unload
def test_autoload_can_be_refused_per_request_and_models_loaded_explicitly(router: Router) -> None:
    router.chat("think")
    resp = httpx.post(router.url + "/models/unload", json={"model": "think"})
    assert resp.status_code == 200 and resp.json()["success"] is True
    assert router.status("think") == "unloaded"
    resp = httpx.post(router.url + "/models/unload", json={"model": "think"})
    assert resp.status_code == 400 and resp.json()["error"]["message"] == "model is not loaded"

    resp = httpx.post(
        router.url + "/v1/chat/completions?autoload=false",
        json={"model": "think", "messages": [{"role": "user", "content": "Hi"}]},
    )
    assert resp.status_code == 400
    assert resp.json()["error"]["message"] == "model is not loaded"
    assert router.status("think") == "unloaded"

    resp = httpx.post(router.url + "/models/load", json={"model": "think"}, timeout=60)
    assert resp.status_code == 200
    assert resp.json()["model"]["status"]["value"] == "loaded"
    assert router.chat("think", headers={}).status_code == 200
    resp = httpx.post(router.url + "/models/load", json={})
    assert resp.json()["error"]["message"] == "model name is missing from the request"


def test_killed_child_is_reported_then_restarted(router: Router) -> None:
    assert router.chat("small").status_code == 200
    old = pid_of(router, "small")
    os.kill(old, signal.SIGKILL)
    status = router.wait_status("small", "failed")["status"]
    assert status["message"].startswith("process killed by SIGKILL")
    assert status["exit_code"] == -9
    assert router.chat("small").status_code == 200
    new = pid_of(router, "small")
    assert new != old
    # killed just before a request: the request itself restarts it
    os.kill(new, signal.SIGKILL)
    assert router.chat("small").status_code == 200
    assert pid_of(router, "small") not in (old, new)


# ----------------------------------------------------------------------------- streaming
def test_stream_is_relayed_as_generated(router: Router) -> None:
    body = {
        "model": "small",
        "stream": True,
        "ignore_eos": True,
        "max_tokens": 96,
        "messages": [{"role": "user", "content": "Tell me a story"}],
    }
    arrivals: list[tuple[float, str]] = []
    with httpx.stream("POST", router.url + "/v1/chat/completions", json=body, timeout=60) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        assert "content-length" not in r.headers
        for line in r.iter_lines():
            if line.startswith("data: "):
                arrivals.append((time.monotonic(), line[6:]))
    assert arrivals[-1][1] == "[DONE]"
    events = [(t, json.loads(d)) for t, d in arrivals[:-1]]
    last = next(t for t, e in events if e["choices"] and e["choices"][0].get("finish_reason"))
    first = events[0][0]
    assert len(arrivals) > 90
    # buffered, every event would arrive together at the end of the generation
    assert last - first > 0.05, f"first event only {last - first:.3f} s before the end"


def child_metrics(router: Router, model: str) -> dict[str, float]:
    """The model's child's own /metrics (the router needs `metrics=True`), read on its port
    with its secret."""
    port = router.models()[model]["runtime"]["port"]
    text = httpx.get(
        f"http://127.0.0.1:{port}/metrics", headers=child_auth(router, model), timeout=10
    ).text
    rows = (line.rsplit(" ", 1) for line in text.splitlines() if line and line[0] != "#")
    return {name: float(value) for name, value in rows}


def test_client_disconnect_stops_the_generation_in_the_child(router: Router) -> None:
    max_tokens = 400  # "small" has 512 positions per slot
    body = {
        "model": "small",
        "stream": True,
        "ignore_eos": True,
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": "Go on"}],
    }
    router.chat("small")  # loaded before its counters are read
    before = child_metrics(router, "small")["llamactl:tokens_predicted_total"]
    with httpx.stream("POST", router.url + "/v1/chat/completions", json=body, timeout=60) as r:
        events = (line for line in r.iter_lines() if line.startswith("data: "))
        next(events), next(events)  # tokens are coming: the child's slot is busy
        assert router.models()["small"]["runtime"]["requests"] == 1
        assert child_metrics(router, "small")["llamactl:requests_processing"] == 1
    # the client is gone: the router's request ends, and so does the child's generation
    deadline = time.monotonic() + 10
    while (
        router.models()["small"]["runtime"]["requests"]
        or child_metrics(router, "small")["llamactl:requests_processing"]
    ):
        assert time.monotonic() < deadline, "the child's slot is still busy"
        time.sleep(0.05)
    generated = child_metrics(router, "small")["llamactl:tokens_predicted_total"] - before
    assert generated < max_tokens, "the child generated the whole answer for nobody"
    time.sleep(0.3)
    assert child_metrics(router, "small")["llamactl:tokens_predicted_total"] - before == generated


# ----------------------------------------------------------------------------- websockets
def test_websocket_is_proxied_both_ways_with_close_codes(router: Router) -> None:
    ws_url = router.url.replace("http://", "ws://")
    with ws_connect(ws_url + "/v1/echo?model=tiny") as ws:
        ws.send("hello")
        assert ws.recv(timeout=10) == "hello"
        ws.send(b"\x00\x01binary")
        assert ws.recv(timeout=10) == b"\x00\x01binary"
        ws.send("whoami")
        # the alias reaches the child as the model's own name, with the child's own secret
        seen = json.loads(ws.recv(timeout=10))
        assert seen["model"] == "small"
        assert seen["authorization"] == f"Bearer {secret_of(router, 'small')}"
        ws.send("close:4001")
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=10)
        assert ws.close_code == 4001 and ws.close_reason == "asked to"


def test_websocket_refusals_keep_their_status(router: Router) -> None:
    ws_url = router.url.replace("http://", "ws://")
    with pytest.raises(InvalidStatus) as err:
        ws_connect(ws_url + "/v1/echo")
    assert err.value.response.status_code == 400
    body = json.loads(err.value.response.body)
    assert body["error"]["message"] == "model name is missing from the request"
    with pytest.raises(InvalidStatus) as err:
        ws_connect(ws_url + "/v1/echo?model=nope")
    assert json.loads(err.value.response.body)["error"]["message"] == "model 'nope' not found"
    with pytest.raises(InvalidStatus) as err:  # the child has no such websocket route
        ws_connect(ws_url + "/v1/nothing-here?model=small")
    assert err.value.response.status_code in (403, 404)


def test_realtime_transcription_session_through_the_router(router: Router) -> None:
    ws_url = router.url.replace("http://", "ws://")
    url = ws_url + "/v1/realtime?intent=transcription&model=tiny"
    pcm, rate = speech(SENTENCES[0], "en-us+f2")
    pcm = to_rate(pcm, rate, 24000)
    with ws_connect(url, open_timeout=60) as ws:

        def event() -> dict[str, Any]:
            return json.loads(ws.recv(timeout=120))

        assert event()["type"] == "session.created"
        for i in range(0, pcm.size, 4800):
            chunk = pcm[i : i + 4800].astype("<i2").tobytes()
            audio = base64.b64encode(chunk).decode()
            ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": audio}))
        ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
        seen = [event()]
        while seen[-1]["type"] != "conversation.item.input_audio_transcription.completed":
            assert seen[-1]["type"] != "error", seen[-1]
            seen.append(event())
    types = [e["type"] for e in seen]
    assert types.index("input_audio_buffer.committed") < len(types) - 1
    assert heard(0, seen[-1]["transcript"]), seen[-1]["transcript"]
    # the session ran in the child of the model it named
    assert router.status("small") == "loaded"


def test_speech_is_routed_by_model(router: Router) -> None:
    resp = httpx.post(router.url + "/tts", json={"model": "tiny", "input": "Hello"}, timeout=60)
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"] == "audio/wav" and resp.content[:4] == b"RIFF"
    body = {"model": "tiny", "input": "Hello there", "stream": True}
    with httpx.stream("POST", router.url + "/tts", json=body, timeout=60) as r:
        assert r.headers["content-type"].startswith("audio/pcm")
        assert sum(len(c) for c in r.iter_bytes()) > 1000
    resp = httpx.post(router.url + "/tts", json={"input": "Hello"}, timeout=60)
    assert resp.status_code == 400
    assert resp.json()["error"]["message"] == "model name is missing from the request"


# ----------------------------------------------------------------------------- ps / stop
def test_ps_and_stop(router: Router) -> None:
    runner = CliRunner()
    router.chat("small")
    result = runner.invoke(cli_app, ["ps", "--url", router.url, "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in json.loads(result.output)}
    assert rows["small"]["status"] == "loaded" and rows["small"]["slots_total"] == 2
    assert rows["small"]["memory_bytes"] > 0 and "broken" not in rows
    table = runner.invoke(cli_app, ["ps", "--url", router.url, "--all"]).output
    assert "small" in table and "MiB" in table and "broken" in table and "failed" in table

    result = runner.invoke(cli_app, ["stop", "tiny", "--url", router.url])
    assert result.exit_code == 0 and "Stopped tiny" in result.output
    assert router.status("small") == "unloaded"
    result = runner.invoke(cli_app, ["stop", "small", "--url", router.url])
    assert result.exit_code == 1 and "model is not loaded" in result.output
    result = runner.invoke(cli_app, ["stop", "x", "--url", "http://127.0.0.1:9"])
    assert result.exit_code == 1 and "no server at http://127.0.0.1:9" in result.output


# ----------------------------------------------------------------------------- other routers
def test_lru_unload_at_models_max_1_waits_for_busy_models(tmp_path: Path) -> None:
    with run_router(tmp_path, models_max=1) as router:
        assert router.chat("small").status_code == 200
        assert router.chat("think").status_code == 200
        models = router.models()
        assert models["small"]["status"]["value"] == "unloaded"
        assert models["think"]["status"]["value"] == "loaded"

        # a model answering a request is not evicted: the other model's load waits for it
        body = {
            "model": "think",
            "stream": True,
            "ignore_eos": True,
            "max_tokens": 64,
            "messages": [{"role": "user", "content": "Go on"}],
        }
        results: dict[str, Any] = {}

        def other() -> None:
            results["small"] = router.chat("small")

        with httpx.stream("POST", router.url + "/v1/chat/completions", json=body, timeout=60) as r:
            lines = r.iter_lines()
            next(lines)
            waiter = threading.Thread(target=other)
            waiter.start()
            time.sleep(0.3)
            assert router.status("think") == "loaded"
            rest = [line for line in lines if line]
        assert rest[-1] == "data: [DONE]" and not any('"error"' in line for line in rest)
        waiter.join(60)
        assert results["small"].status_code == 200
        assert router.status("think") == "unloaded"


def test_idle_models_are_unloaded(tmp_path: Path) -> None:
    with run_router(tmp_path, sleep_idle_seconds=0.5) as router:
        assert router.chat("small").status_code == 200
        pid = pid_of(router, "small")
        router.wait_status("small", "unloaded", timeout=10)
        wait_gone(pid)


def test_keys_are_checked_by_the_router_only(tmp_path: Path) -> None:
    auth = {"Authorization": f"Bearer {KEY}"}
    with run_router(tmp_path, api_key=[KEY]) as router:
        assert httpx.get(router.url + "/health").status_code == 200
        resp = router.chat("small")
        assert resp.status_code == 401
        assert resp.json()["error"]["type"] == "authentication_error"
        assert httpx.get(router.url + "/models").status_code == 401
        assert router.chat("small", headers={"X-Api-Key": KEY}).status_code == 200
        runtime = router.models(**auth)["small"]["runtime"]
        # the child is bound to loopback and takes only its own secret, not the client's key
        for headers in ({}, auth):
            direct = httpx.post(
                f"http://127.0.0.1:{runtime['port']}/v1/chat/completions",
                json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2},
                headers=headers,
                timeout=60,
            )
            assert direct.status_code == 401
        ws_url = router.url.replace("http://", "ws://") + "/v1/echo?model=small"
        with pytest.raises(InvalidStatus) as err:
            ws_connect(ws_url)
        assert err.value.response.status_code == 401
        with ws_connect(ws_url, additional_headers=auth) as ws:
            ws.send("whoami")
            got = json.loads(ws.recv(timeout=10))["authorization"]
            assert got == f"Bearer {secret_of(router, 'small')}" != auth["Authorization"]
        result = CliRunner().invoke(cli_app, ["ps", "--url", router.url, "--api-key", KEY])
        assert result.exit_code == 0 and "small" in result.output


def test_serve_command_starts_a_router_and_stops_its_children(tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMACTL_")}
    env["LLAMACTL_CONFIG"] = os.devnull
    cmd = [sys.executable, "-m", "llamactl", "serve", "--port", str(port), "--threads", "1"]
    cmd += ["--models-preset", str(write_preset(tmp_path)), "--models-max", "1"]
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/health").status_code == 200:
                    break
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.1)
        resp = httpx.post(
            url + "/v1/chat/completions",
            json={"model": "tiny", "max_tokens": 2, "messages": [{"role": "user", "content": "x"}]},
            timeout=60,
        )
        assert resp.status_code == 200, resp.text
        child = httpx.get(url + "/models").json()["data"][0]["runtime"]["pid"]
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "(router): 2 models" in err
    wait_gone(child, timeout=1)  # stopped by the router before it exited
