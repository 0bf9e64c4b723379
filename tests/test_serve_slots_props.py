"""llama-server's `/slots` and `/props` on the real model, and llama-server's command line
(`--temp`, `--seed`, `-n`, `--no-slots`, `--no-jinja`, `-cb` ...) accepted by `llamactl serve`."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from processkit import ServeProcess, serve
from serverkit import LiveServer, free_port, run_server

MODEL_FIXTURES = {"two_slots"}

HI = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def two_slots() -> Iterator[LiveServer]:
    with run_server(  # --slots-content: the prompt and the answer are shown too
        parallel=2, n_ctx=1024, temperature=0.5, seed=42, max_tokens=64, slots_content=True
    ) as live:
        yield live


def slots(live: LiveServer, **params: str) -> httpx.Response:
    return httpx.get(live.url + "/slots", params=params, timeout=30)


def model_meta(live: LiveServer | ServeProcess) -> dict:
    [model] = httpx.get(live.url + "/v1/models", timeout=30).json()["data"]
    return model["meta"]


def chat(live: LiveServer, content: str, **extra: object) -> dict:
    body = {"messages": [{"role": "user", "content": content}], "temperature": 0, **extra}
    r = httpx.post(live.v1 + "/chat/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def test_slots_before_and_after_a_job(two_slots) -> None:
    fresh = slots(two_slots).json()
    assert [s["id"] for s in fresh] == [0, 1]
    slot_size = model_meta(two_slots)["n_ctx_slot"]  # one number in /slots, /props, /v1/models
    assert 511 <= slot_size <= 512  # 1024 / 2, less a cell held for a companion row
    assert all(s["n_ctx"] == slot_size and s["is_processing"] is False for s in fresh)
    assert all("params" not in s for s in fresh)  # no job yet, as llama-server answers

    answer = chat(two_slots, "Name a color.", max_tokens=8, seed=7)
    used = [s for s in slots(two_slots).json() if "params" in s]
    assert len(used) == 1
    slot = used[0]
    assert slot["is_processing"] is False
    assert slot["n_prompt_tokens"] == answer["usage"]["prompt_tokens"]
    assert slot["params"]["temperature"] == 0 and slot["params"]["seed"] == 7
    assert slot["params"]["n_predict"] == 8
    assert slot["next_token"][0]["n_decoded"] == answer["usage"]["completion_tokens"]
    assert slot["generated"].strip() == answer["choices"][0]["message"]["content"].strip()
    assert slot["prompt"].endswith("<|im_start|>assistant\n")


def test_a_running_job_shows_as_processing(two_slots) -> None:
    started = threading.Event()
    seen: list[dict] = []

    def stream() -> None:
        body = {"messages": HI, "temperature": 0, "max_tokens": 200, "stream": True}
        with httpx.stream("POST", two_slots.v1 + "/chat/completions", json=body, timeout=120) as r:
            for line in r.iter_lines():
                if line.startswith("data: ") and not started.is_set():
                    started.set()
                    seen.extend(slots(two_slots).json())

    worker = threading.Thread(target=stream)
    worker.start()
    worker.join(120)
    busy = [s for s in seen if s["is_processing"]]
    assert len(busy) == 1 and busy[0]["next_token"][0]["has_next_token"] is True
    assert busy[0]["params"]["n_predict"] == 200


def test_fail_on_no_slot(two_slots) -> None:
    assert slots(two_slots, fail_on_no_slot="1").status_code == 200  # slots are idle


def test_no_slots_is_a_501(two_slots) -> None:
    state = two_slots.state
    saved = state.settings
    state.settings = dataclasses.replace(saved, slots=False)
    try:
        r = slots(two_slots)
    finally:
        state.settings = saved
    assert r.status_code == 501
    assert r.json()["error"]["type"] == "not_supported_error"
    assert "--slots" in r.json()["error"]["message"]


def test_props_report_the_servers_defaults(two_slots) -> None:
    props = httpx.get(two_slots.url + "/props", timeout=30).json()
    assert props["total_slots"] == 2 and props["model_path"].endswith(".gguf")
    defaults = props["default_generation_settings"]
    assert defaults["n_ctx"] == model_meta(two_slots)["n_ctx_slot"]
    assert defaults["params"]["seed"] == 42 and defaults["params"]["temperature"] == 0.5
    assert defaults["params"]["n_predict"] == 64
    assert "<|im_start|>" in props["chat_template"]
    assert props["endpoint_slots"] is True and props["endpoint_props"] is False
    assert props["bos_token"] and props["eos_token"]


def test_post_props_needs_the_flag(two_slots) -> None:
    r = httpx.post(two_slots.url + "/props", json={}, timeout=30)
    assert r.status_code == 501 and "--props" in r.json()["error"]["message"]
    state = two_slots.state
    saved = state.settings
    state.settings = dataclasses.replace(saved, props=True)
    try:
        r = httpx.post(two_slots.url + "/props", json={}, timeout=30)
    finally:
        state.settings = saved
    assert r.status_code == 200 and r.json() == {"success": True}


def test_concurrent_sessions_see_their_own_slots(two_slots) -> None:
    """Two streams at once: each slot shows its own job, and /slots polled meanwhile never
    mixes two jobs' counters (a job's decoded tokens never exceed its limit)."""
    limits = {"Count to ten.": 12, "Say hello.": 9}
    errors: list[str] = []
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            for s in slots(two_slots).json():
                if "params" in s and s["next_token"][0]["n_decoded"] > s["params"]["n_predict"]:
                    errors.append(str(s))

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        alone = {q: chat(two_slots, q, max_tokens=n) for q, n in limits.items()}
        results: dict[str, dict] = {}
        threads = [
            threading.Thread(
                target=lambda q=q, n=n: results.update({q: chat(two_slots, q, max_tokens=n)})
            )
            for q, n in limits.items()
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    finally:
        done.set()
        poller.join(30)
    assert errors == []
    for q in limits:
        assert results[q]["choices"][0]["message"] == alone[q]["choices"][0]["message"]
    jobs = {s["params"]["n_predict"] for s in slots(two_slots).json() if "params" in s}
    assert jobs == set(limits.values())


@pytest.mark.slow
def test_llama_server_command_lines_are_taken(tmp_path: Path) -> None:
    """The command line llama.cpp's own server tests start llama-server with."""
    port = free_port()
    args = ["--port", str(port), "--temp", "0.8", "--seed", "42", "--host", "127.0.0.1"]
    args += ["--batch-size", "32", "--no-slots", "--ctx-size", "512", "--parallel", "2"]
    args += ["--n-predict", "64", "--no-jinja", "-cb", "--top-k", "30", "--strict-model-names"]
    args += ["--alias", "tinyllama-2,fim,code", "--tags", "chat,fim,small"]
    with serve(tmp_path, *args, port=port) as live:
        live.wait_healthy()
        props = httpx.get(live.url + "/props", timeout=30).json()
        params = props["default_generation_settings"]["params"]
        assert (params["temperature"], params["seed"], params["n_predict"]) == (0.8, 42, 64)
        assert params["top_k"] == 30 and props["total_slots"] == 2
        assert props["default_generation_settings"]["n_ctx"] == model_meta(live)["n_ctx_slot"]
        assert props["model_alias"] == "code"  # the first alias in sorted order, as llama-server
        assert httpx.get(live.url + "/slots", timeout=30).status_code == 501
        [model] = httpx.get(live.url + "/v1/models", timeout=30).json()["data"]
        assert model["id"] == "code" and model["aliases"] == ["code", "fim", "tinyllama-2"]
        assert model["tags"] == ["chat", "fim", "small"]
        for name, status in (("fim", 200), ("tinyllama-2", 200), ("gpt-4o", 400)):
            body = {"model": name, "prompt": "Hi", "n_predict": 1}
            assert httpx.post(live.url + "/completion", json=body, timeout=60).status_code == status
