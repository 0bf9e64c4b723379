"""The prompt cache through the server: every API family reports the restored tokens."""

from __future__ import annotations

import httpx
import pytest
from serverkit import run_server

pytestmark = pytest.mark.slow  # every test here loads a model

SYSTEM_A = "You answer about geography."
SYSTEM_B = "You write short poems."


def _chat(url: str, system: str, user: str) -> dict:
    body = {
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
        "max_tokens": 4,
        "temperature": 0,
    }
    r = httpx.post(url + "/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["usage"]


def test_every_api_reports_tokens_restored_from_the_cache():
    with run_server(parallel=1, cache_ram=64, metrics=True) as srv:
        first = _chat(srv.url, SYSTEM_A, "Name a river.")
        assert first["prompt_tokens_details"]["cached_tokens"] == 0
        _chat(srv.url, SYSTEM_B, "Snow.")  # takes the only slot: the first prompt is saved
        again = _chat(srv.url, SYSTEM_A, "Name a river.")
        n = again["prompt_tokens"]
        assert again["prompt_tokens_details"]["cached_tokens"] == n - 1

        _chat(srv.url, SYSTEM_B, "Snow.")
        anthropic = httpx.post(
            srv.url + "/v1/messages",
            json={
                "model": httpx.get(srv.url + "/v1/models").json()["data"][0]["id"],
                "system": SYSTEM_A,
                "max_tokens": 4,
                "temperature": 0,
                "messages": [{"role": "user", "content": "Name a river."}],
            },
            timeout=60,
        ).json()["usage"]
        assert anthropic["cache_read_input_tokens"] == n - 1
        assert anthropic["input_tokens"] == 1

        _chat(srv.url, SYSTEM_B, "Snow.")
        responses = httpx.post(
            srv.url + "/v1/responses",
            json={
                "instructions": SYSTEM_A,
                "input": "Name a river.",
                "max_output_tokens": 4,
                "temperature": 0,
            },
            timeout=60,
        ).json()["usage"]
        assert responses["input_tokens_details"]["cached_tokens"] == n - 1

        metrics = httpx.get(srv.url + "/metrics", timeout=10).text
        values = dict(line.split(" ") for line in metrics.splitlines() if line[0] != "#")
        assert int(values["llamactl:prompt_cache_restores_total"]) == 5  # 3 of A, 2 of B
        # A and B both stay: each restore was of a prompt short of its entry (the answer
        # after it), and an entry a prompt cuts is copied into the slot, not taken out
        assert int(values["llamactl:prompt_cache_entries"]) == 2


def test_cache_ram_zero_turns_it_off():
    with run_server(parallel=1, cache_ram=0) as srv:
        _chat(srv.url, SYSTEM_A, "Name a river.")
        _chat(srv.url, SYSTEM_B, "Snow.")
        again = _chat(srv.url, SYSTEM_A, "Name a river.")
        assert again["prompt_tokens_details"]["cached_tokens"] < again["prompt_tokens"] // 2
        assert srv.app.state.llamactl.engine.cache is None
