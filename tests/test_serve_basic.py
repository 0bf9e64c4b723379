"""Health, the model list, metrics, the loading gate, queueing, CORS and request ids.

The loading tests drive the app in-process with TestClient and a ServerState whose
`engine_factory` we control; the rest use live servers on loopback.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from llamactl.server.app import create_app
from llamactl.server.state import ServerState, _default_engine
from serverkit import LiveServer, hermetic_settings, run_server
from starlette.testclient import TestClient
from typer.testing import CliRunner

from llamactl.cli.main import app as cli_app
from llamactl.models import embedded_model_path

MODEL_FIXTURES = {"small"}  # fixtures that load a model: users are slow

HI = [{"role": "user", "content": "Hi"}]
LOADING = {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}


@pytest.fixture(scope="module")
def small() -> Iterator[LiveServer]:
    """One slot, a queue of one, metrics on, and an alias."""
    with run_server(parallel=1, max_queue=1, metrics=True, alias="tiny-model") as live:
        yield live


def sse_chunks(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    for line in lines:
        if line.startswith("data: {"):
            yield json.loads(line[6:])


def metric_values(live: LiveServer) -> dict[str, float]:
    r = httpx.get(live.url + "/metrics", timeout=10)
    assert r.status_code == 200, r.text
    values = {}
    for line in r.text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


def no_eos(live: LiveServer) -> dict[str, float]:
    model = live.state.engine.model
    return {str(t): -100 for t in range(256) if model.is_eog(t)}


# ----------------------------------------------------------------------- health and models
def test_health(server: LiveServer) -> None:
    for path in ("/health", "/v1/health"):
        r = httpx.get(server.url + path, timeout=10)
        assert r.status_code == 200
        assert r.json() == {"status": "ok"}


def test_models_lists_the_file_stem_by_default(server: LiveServer) -> None:
    body = httpx.get(server.v1 + "/models", timeout=10).json()
    assert [m["id"] for m in body["data"]] == [server.state.model_path.stem]


def test_models_shape_with_alias(small: LiveServer) -> None:
    body = httpx.get(small.v1 + "/models", timeout=10).json()
    assert body["object"] == "list"
    [model] = body["data"]
    assert model["id"] == "tiny-model"
    assert model["object"] == "model"
    assert model["owned_by"] == "llamactl"
    assert isinstance(model["created"], int)
    meta = model["meta"]
    assert meta["architecture"] == "llama"
    assert model["architecture"] == {"input_modalities": ["text"], "output_modalities": ["text"]}
    assert model["capabilities"] == ["text", "audio_in", "audio_out"]
    assert meta["n_ctx_slot"] > 0 and meta["n_vocab"] > 0 and meta["size"] > 0
    other = httpx.get(small.url + "/models", timeout=10).json()
    assert other["data"][0].pop("runtime").keys() == model.pop("runtime").keys()
    assert other == body
    # the alias is a name requests may use
    r = httpx.post(
        small.v1 + "/chat/completions",
        json={"model": "tiny-model", "messages": HI, "max_tokens": 1},
        timeout=60,
    )
    assert r.status_code == 200
    assert r.json()["model"] == "tiny-model"


# --------------------------------------------------------------------------------- loading
LOOPBACK = "http://localhost"  # TestClient's default Host, testserver, fails the Host check


def gated_app(factory, **overrides: Any):
    settings = hermetic_settings({"parallel": 1, "threads": 2, **overrides})
    state = ServerState(settings, embedded_model_path(), engine_factory=factory)
    return create_app(settings, state=state), state


@pytest.mark.slow
def test_every_route_answers_503_while_loading() -> None:
    release = threading.Event()

    def slow_factory(state: ServerState):
        assert release.wait(60)
        return _default_engine(state)

    app, state = gated_app(slow_factory, metrics=True)
    with TestClient(app, base_url=LOOPBACK) as client:
        try:
            for path in ("/health", "/v1/health", "/v1/models", "/metrics"):
                r = client.get(path, headers={"X-Request-Id": "load-1"})
                assert (r.status_code, r.json()) == (503, LOADING), path
                assert r.headers["x-request-id"] == "load-1"
            for path in ("/v1/chat/completions", "/v1/completions", "/v1/responses"):
                r = client.post(path, json={"messages": HI, "prompt": "x", "input": "x"})
                assert (r.status_code, r.json()) == (503, LOADING), path
            r = client.post("/v1/messages", json={"model": "m", "max_tokens": 1, "messages": HI})
            assert r.status_code == 503
            assert r.json()["error"] == {"type": "overloaded_error", "message": "Loading model"}
            # the API schema does not need the model
            assert client.get("/openapi.json").status_code == 200
        finally:
            release.set()
        state.wait_loaded(60)
        assert client.get("/health").json() == {"status": "ok"}
        r = client.post("/v1/chat/completions", json={"messages": HI, "max_tokens": 2})
        assert r.status_code == 200
        assert r.json()["usage"]["completion_tokens"] >= 1
        # a graceful stop begins (SIGTERM's first step): balancers' checks see 503 at once
        assert state.drain()
        health = client.get("/health")
        assert health.status_code == 503
        assert health.json()["error"]["message"] == "Server is shutting down"


@pytest.mark.slow
def test_a_model_that_fails_to_load(tmp_path: Path) -> None:
    """The server stays up and every route says why (llama-server would exit instead); the
    loading gate comes before the key check, as in llama-server."""
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"not a gguf file at all" * 10)
    settings = hermetic_settings({"parallel": 1, "threads": 1, "api_key": ["k"]})
    app = create_app(settings, model_path=broken)
    with TestClient(app, base_url=LOOPBACK) as client:
        app.state.llamactl.wait_loaded(60)
        health = client.get("/health")
        assert health.status_code == 503
        error = health.json()["error"]
        assert error["type"] == "unavailable_error"
        assert "could not load" in error["message"] and str(broken) in error["message"]
        chat = client.post("/v1/chat/completions", json={"messages": HI})
        assert (chat.status_code, chat.json()) == (503, health.json())


# --------------------------------------------------------------------------------- metrics
def test_metrics_need_the_flag(server: LiveServer) -> None:
    r = httpx.get(server.url + "/metrics", timeout=10)
    assert r.status_code == 501
    error = r.json()["error"]
    assert error["type"] == "not_supported_error"
    assert "--metrics" in error["message"]


def test_metrics_counters_move(small: LiveServer) -> None:
    r = httpx.get(small.url + "/metrics", timeout=10)
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert "# TYPE llamactl:requests_total counter" in r.text
    assert "# TYPE llamactl:requests_processing gauge" in r.text
    before = metric_values(small)
    body = {"messages": [{"role": "user", "content": "Count: one"}], "max_tokens": 3}
    r = httpx.post(small.v1 + "/chat/completions", json=body, timeout=60)
    assert r.status_code == 200
    after = metric_values(small)
    route = 'llamactl:http_requests_total{route="/v1/chat/completions"}'
    assert after["llamactl:requests_total"] == before["llamactl:requests_total"] + 1
    generated = r.json()["usage"]["completion_tokens"]
    predicted = "llamactl:tokens_predicted_total"
    assert after[predicted] - before[predicted] >= generated >= 1
    assert after["llamactl:prompt_tokens_total"] > before["llamactl:prompt_tokens_total"]
    assert after[route] == before.get(route, 0) + 1
    assert after["llamactl:slots_total"] == 1
    assert after["llamactl:requests_processing"] == 0
    assert after["llamactl:uptime_seconds"] >= before["llamactl:uptime_seconds"]


def test_gateway_metrics_follow_load_and_cache(small: LiveServer) -> None:
    """vLLM's names, as the Gateway API Inference Extension's endpoint picker reads them:
    a running stream is counted while it runs, the KV holds its tokens, and a repeated
    prompt counts as prefix-cache hits."""
    label = '{model_name="tiny-model"}'
    text = httpx.get(small.url + "/metrics", timeout=10).text
    for name, kind in (
        ("num_requests_waiting", "gauge"),
        ("num_requests_running", "gauge"),
        ("kv_cache_usage_perc", "gauge"),
        ("gpu_cache_usage_perc", "gauge"),
        ("prefix_cache_queries_total", "counter"),
        ("prefix_cache_hits_total", "counter"),
    ):
        assert f"# TYPE vllm:{name} {kind}" in text
    body = {"messages": HI, "max_tokens": 120, "stream": True, "logit_bias": no_eos(small)}
    with httpx.stream("POST", small.v1 + "/chat/completions", json=body, timeout=120) as r:
        lines = r.iter_lines()
        next(c for c in sse_chunks(lines) if c["choices"] and c["choices"][0]["delta"])
        during = metric_values(small)
        for _ in lines:
            pass
    assert during[f"vllm:num_requests_running{label}"] == 1
    assert during[f"vllm:num_requests_waiting{label}"] == 0
    assert 0 < during[f"vllm:kv_cache_usage_perc{label}"] <= 1
    assert during[f"vllm:gpu_cache_usage_perc{label}"] == during[f"vllm:kv_cache_usage_perc{label}"]
    once = {"messages": [{"role": "user", "content": "Name a colour."}], "max_tokens": 2}
    assert httpx.post(small.v1 + "/chat/completions", json=once, timeout=60).status_code == 200
    before = metric_values(small)
    r = httpx.post(small.v1 + "/chat/completions", json=once, timeout=60)
    cached = r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
    after = metric_values(small)
    hits, queries = (
        f"vllm:prefix_cache_hits_total{label}",
        f"vllm:prefix_cache_queries_total{label}",
    )
    assert cached > 0 and after[hits] - before[hits] == cached
    assert after[queries] - before[queries] == r.json()["usage"]["prompt_tokens"]
    assert after[f"vllm:num_requests_running{label}"] == 0


def test_metrics_label_requests_by_route_template(small: LiveServer) -> None:
    """GET /v1/responses/{id} for many ids is one label, not one per id."""
    for rid in ("resp_one", "resp_two", "resp_three"):
        assert httpx.get(small.v1 + f"/responses/{rid}", timeout=10).status_code == 404
    text = httpx.get(small.url + "/metrics", timeout=10).text
    assert 'llamactl:http_requests_total{route="/v1/responses/{response_id}"} 3' in text
    assert "resp_one" not in text and "resp_two" not in text


# ---------------------------------------------------------------------------------- queue
def test_full_queue_refuses_without_touching_running_streams(small: LiveServer) -> None:
    """One slot and a queue of one: with a stream running and one waiting, a third request is
    refused at once with 503, and both streams still finish normally."""
    long_body = {
        "messages": HI,
        "max_tokens": 160,
        "stream": True,
        "stream_options": {"include_usage": True},
        "logit_bias": no_eos(small),
    }
    short_body = {"messages": HI, "max_tokens": 4, "stream": True}
    queued: list[dict[str, Any]] = []

    def run_queued() -> None:
        with httpx.stream(
            "POST", small.v1 + "/chat/completions", json=short_body, timeout=120
        ) as r:
            queued.extend(sse_chunks(r.iter_lines()))

    with httpx.stream("POST", small.v1 + "/chat/completions", json=long_body, timeout=120) as r:
        assert r.status_code == 200
        running = sse_chunks(r.iter_lines())
        first = [next(running) for _ in range(2)]  # the role chunk, then a token: it has a slot
        waiter = threading.Thread(target=run_queued)
        waiter.start()
        deadline = time.monotonic() + 30
        while small.state.engine.queue_depth < 1:
            assert time.monotonic() < deadline, "the second request never queued"
            time.sleep(0.01)

        gauges = metric_values(small)
        assert gauges["llamactl:requests_processing"] == 1
        assert gauges["llamactl:requests_deferred"] == 1
        refused = httpx.post(
            small.v1 + "/chat/completions",
            json={**short_body, "max_tokens": 1},
            headers={"X-Request-Id": "over-the-limit"},
            timeout=30,
        )
        rest = list(running)
    waiter.join(120)

    assert refused.status_code == 503
    assert refused.headers["content-type"].startswith("application/json")
    assert refused.headers["x-request-id"] == "over-the-limit"
    error = refused.json()["error"]
    assert (error["code"], error["type"]) == (503, "unavailable_error")
    assert "busy" in error["message"]

    long_chunks = first + rest
    assert long_chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert long_chunks[-1]["usage"]["completion_tokens"] == 160
    assert queued and queued[-1]["choices"][0]["finish_reason"] in ("length", "stop")
    assert not any("error" in c for c in long_chunks + queued)


# ------------------------------------------------------------------ request ids and CORS
def test_request_id_on_every_response(server: LiveServer) -> None:
    given = {"X-Request-Id": "given-id-1"}
    responses = [
        httpx.get(server.url + "/health", headers=given, timeout=10),
        httpx.get(server.url + "/no/such/path", headers=given, timeout=10),
        httpx.get(server.url + "/metrics", headers=given, timeout=10),  # 501
        httpx.post(server.v1 + "/chat/completions", content=b"{oops", headers=given, timeout=10),
        httpx.post(
            server.v1 + "/chat/completions",
            json={"messages": HI, "max_tokens": 1, "stream": True},
            headers=given,
            timeout=60,
        ),
    ]
    assert [r.status_code for r in responses] == [200, 404, 501, 400, 200]
    assert all(r.headers["x-request-id"] == "given-id-1" for r in responses)

    ids = {httpx.get(server.url + "/health", timeout=10).headers["x-request-id"] for _ in range(3)}
    assert len(ids) == 3
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)


def test_cors_headers_on_simple_requests(server: LiveServer) -> None:
    origin = {"Origin": "http://localhost:3000"}
    r = httpx.get(server.v1 + "/models", headers=origin, timeout=10)
    assert r.headers["access-control-allow-origin"] == "http://localhost:3000"
    assert r.headers["access-control-allow-credentials"] == "true"
    assert "x-request-id" in r.headers["access-control-expose-headers"].lower()
    assert "access-control-allow-origin" not in httpx.get(server.v1 + "/models").headers


def test_metrics_under_llama_servers_names(small: LiveServer) -> None:
    """llama-server's `llamacpp:*` names (its dashboards, llama.cpp's own test suite) carry the
    same counters as llamactl's names, and the response has its Process-Start-Time-Unix."""
    body = {"messages": [{"role": "user", "content": "Count: one"}], "max_tokens": 3}
    answer = httpx.post(small.v1 + "/chat/completions", json=body, timeout=60).json()
    r = httpx.get(small.url + "/metrics", timeout=10)
    assert int(r.headers["process-start-time-unix"]) <= time.time()
    text, values = r.text, metric_values(small)
    counters = ["prompt_tokens_total", "prompt_tokens_cached_total", "prompt_seconds_total"]
    counters += ["tokens_predicted_total", "tokens_predicted_seconds_total", "n_decode_total"]
    counters += ["n_tokens_max", "spec_decode_num_draft_tokens_total"]
    gauges = ["prompt_tokens_seconds", "predicted_tokens_seconds", "requests_processing"]
    gauges += ["requests_deferred", "n_busy_slots_per_decode"]
    for name, kind in [(c, "counter") for c in counters] + [(g, "gauge") for g in gauges]:
        assert f"# TYPE llamacpp:{name} {kind}" in text and f"# HELP llamacpp:{name} " in text
    for shared in ("prompt_tokens_total", "prompt_tokens_cached_total", "tokens_predicted_total"):
        assert values[f"llamacpp:{shared}"] == values[f"llamactl:{shared}"]
    assert values["llamacpp:n_decode_total"] == values["llamactl:decode_calls_total"] > 0
    assert values["llamacpp:n_tokens_max"] >= answer["usage"]["total_tokens"]
    assert values["llamacpp:requests_processing"] == 0
    assert 0 < values["llamacpp:n_busy_slots_per_decode"] <= 1  # one slot


def test_ps_shows_the_single_model_servers_process(small: LiveServer) -> None:
    """`llamactl ps` on a single-model server: its pid, memory and slots, as a router's child."""
    result = CliRunner().invoke(cli_app, ["ps", "--url", small.url, "--json"])
    assert result.exit_code == 0, result.output
    [row] = json.loads(result.output)
    assert row["name"] == "tiny-model" and row["status"] == "loaded"
    assert row["pid"] > 0 and row["memory_bytes"] > 0
    assert row["slots_total"] == small.state.engine.config.n_parallel
    assert row["idle_seconds"] >= 0
    table = CliRunner().invoke(cli_app, ["ps", "--url", small.url]).output
    assert re.search(r"\d (KiB|MiB|GiB)", table) and f"0/{row['slots_total']}" in table
