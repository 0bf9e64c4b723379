"""Soak and fault tests on a real `llamactl serve` process (marker `soak`; CI runs them).

Bounded in count and time, loopback only. Memory is the server process's RSS; the prompt cache
is kept small (`--cache-ram 32`) so that what is left is what would leak. The figures for a
30-minute soak are `bench/robustness.py`'s; these tests hold the bounds a regression would
break. `LLAMACTL_SOAK_SECONDS` makes the mixed soak longer.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from processkit import NO_EOS, ServeProcess, run_cli, serve
from serverkit import free_port

from llamactl.models import embedded_model_path

pytestmark = [pytest.mark.soak, pytest.mark.slow]

SOAK_SECONDS = float(os.environ.get("LLAMACTL_SOAK_SECONDS", "75"))
HI = [{"role": "user", "content": "Hi"}]


def start(tmp_path: Path, *args: str):
    port = free_port()
    base = ["--port", str(port), "--threads", "2", "--cache-ram", "32", "--metrics"]
    return serve(tmp_path, *base, *args, port=port)


def busy_slots(live: ServeProcess) -> int:
    text = httpx.get(live.url + "/metrics", timeout=10).text
    for line in text.splitlines():
        if line.startswith("llamactl:requests_processing "):
            return int(float(line.split()[1]))
    raise AssertionError("no requests_processing gauge in /metrics")


def wait_idle(live: ServeProcess, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while busy_slots(live) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert busy_slots(live) == 0


# ------------------------------------------------------------------------------ mixed soak


def _one_request(client: httpx.Client, rng: random.Random) -> int:
    """One request of a random family and mode; returns its status."""
    n = rng.randint(4, 24)
    prompt = [{"role": "user", "content": f"Tell me about the number {rng.randint(0, 999)}."}]
    kind = rng.choice(["chat", "chat-stream", "completion", "anthropic-stream", "responses"])
    requests: dict[str, tuple[str, dict[str, Any]]] = {
        "chat": ("/v1/chat/completions", {"messages": prompt, "max_tokens": n}),
        "chat-stream": (
            "/v1/chat/completions",
            {"messages": prompt, "max_tokens": n, "stream": True},
        ),
        "completion": ("/v1/completions", {"prompt": "Once upon a time", "max_tokens": n}),
        "anthropic-stream": (
            "/v1/messages",
            {"model": "m", "max_tokens": n, "messages": prompt, "stream": True},
        ),
        "responses": ("/v1/responses", {"input": prompt[0]["content"], "max_output_tokens": n}),
    }
    path, body = requests[kind]
    if kind == "anthropic-stream":
        body["model"] = client.get("/v1/models").json()["data"][0]["id"]
    if body.get("stream"):
        with client.stream("POST", path, json=body) as r:
            for _ in r.iter_lines():
                pass
            return r.status_code
    return client.post(path, json=body).status_code


def test_32_mixed_clients_hold_memory_flat(tmp_path: Path) -> None:
    with start(tmp_path, "--parallel", "4") as live:
        live.wait_healthy()
        stop = threading.Event()
        statuses: list[int] = []

        def client_loop(seed: int) -> None:
            rng = random.Random(seed)
            with httpx.Client(base_url=live.url, timeout=120) as client:
                while not stop.is_set():
                    statuses.append(_one_request(client, rng))

        threads = [threading.Thread(target=client_loop, args=(i,)) for i in range(32)]
        for t in threads:
            t.start()
        try:
            time.sleep(min(20.0, SOAK_SECONDS / 3))  # warm-up: caches, allocator arenas
            warm = live.rss_kib
            time.sleep(SOAK_SECONDS)
            end = live.rss_kib
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=180)
        assert statuses and set(statuses) == {200}, sorted(set(statuses))
        wait_idle(live)
        # a leak of even a few KB per request would pass this bound within minutes
        assert end <= warm * 1.10, (warm, end)
        assert live.stop(signal.SIGTERM) == 0
        assert "Traceback" not in live.stderr


# ------------------------------------------------------------------- clients that disconnect


def test_100_clients_that_disconnect_mid_stream(tmp_path: Path) -> None:
    with start(tmp_path, "--parallel", "4") as live:
        live.wait_healthy()
        body = {"messages": HI, "max_tokens": 400, "stream": True, "logit_bias": NO_EOS}

        def leave_early() -> None:
            with httpx.stream(
                "POST", live.url + "/v1/chat/completions", json=body, timeout=120
            ) as r:
                for i, _ in enumerate(r.iter_lines()):
                    if i >= 4:
                        return  # closes the connection mid-stream

        leave_early()
        wait_idle(live)
        before = live.rss_kib
        for _ in range(10):
            threads = [threading.Thread(target=leave_early) for _i in range(10)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=120)
        wait_idle(live)
        # every slot is free and serves a new request at once
        r = httpx.post(
            live.url + "/v1/chat/completions",
            json={"messages": HI, "max_tokens": 4, "temperature": 0},
            timeout=60,
        )
        assert r.status_code == 200
        assert live.rss_kib <= before * 1.10, (before, live.rss_kib)
        assert live.stop(signal.SIGTERM) == 0
        assert "Traceback" not in live.stderr


# ------------------------------------------------------------------------- SIGTERM, streams


def test_sigterm_drains_running_streams_and_ends_queued_ones(tmp_path: Path) -> None:
    """SIGTERM: running generations finish (within --shutdown-grace), queued ones end at once
    with the shutdown's error event, never a cut connection; the exit code is 0."""
    with start(tmp_path, "--parallel", "4", "--shutdown-grace", "60") as live:
        live.wait_healthy()
        body = {"messages": HI, "max_tokens": 60, "stream": True, "logit_bias": NO_EOS}
        last_events: list[dict[str, Any]] = []
        running = threading.Semaphore(0)

        def stream() -> None:
            with httpx.stream(
                "POST", live.url + "/v1/chat/completions", json=body, timeout=90
            ) as r:
                last: dict[str, Any] = {}
                chunks = 0
                for line in r.iter_lines():
                    if line.startswith("data: {"):
                        last = json.loads(line[6:])
                        chunks += 1
                        if chunks == 3:
                            running.release()
                last_events.append(last)

        threads = [threading.Thread(target=stream) for _ in range(8)]  # 4 running, 4 queued
        for t in threads:
            t.start()
        for _ in range(4):
            assert running.acquire(timeout=60)
        live.proc.send_signal(signal.SIGTERM)
        for t in threads:
            t.join(timeout=90)
        assert live.proc.wait(60) == 0
        assert len(last_events) == 8
        finished = [e for e in last_events if e.get("choices")]
        refused = [e for e in last_events if "error" in e]
        assert len(finished) == 4 and len(refused) == 4, last_events
        assert all(e["choices"][0]["finish_reason"] == "length" for e in finished)
        assert all(e["error"]["type"] == "unavailable_error" for e in refused)
        assert "Traceback" not in live.stderr


# -------------------------------------------------------------------------- a broken model


def test_truncated_gguf_is_a_clear_error(tmp_path: Path) -> None:
    source = embedded_model_path()
    assert source is not None
    broken = tmp_path / "broken.gguf"
    with source.open("rb") as src, broken.open("wb") as dst:
        shutil.copyfileobj(src, dst, length=1 << 20)
        dst.truncate(source.stat().st_size // 2)
    chat = run_cli("chat", "-m", str(broken), "Hello", timeout=120)
    assert chat.returncode == 1
    assert "Traceback" not in chat.stderr
    assert "broken.gguf" in chat.stderr

    # serve exits as llama-server does, rather than answering 503 for ever
    served = run_cli("serve", "--port", str(free_port()), "-m", str(broken), timeout=120)
    assert served.returncode == 1
    assert "Error: could not load the model" in served.stderr
    assert "broken.gguf" in served.stderr
    assert "Traceback" not in served.stderr
