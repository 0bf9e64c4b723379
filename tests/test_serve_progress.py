"""`return_progress`: a stream reports how far its prompt has been decoded, as llama-server's
`prompt_progress` {total, cache, processed, time_ms}: once when the prompt starts (processed
equals cache) and after every prompt batch, ending at processed == total; in chat
completions, native `/completion` and Responses streams. Asking changes no output."""

from __future__ import annotations

import json
import math
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

BATCH = 32
LONG = [{"role": "user", "content": "This is a test of prompt progress reporting. " * 12}]

pytestmark = pytest.mark.slow  # its own server, with a small batch so prompts take several


@pytest.fixture(scope="module")
def small_batch_server():
    from serverkit import run_server

    with run_server(parallel=2, batch_size=BATCH, ubatch_size=BATCH) as live:
        yield live


def _stream(live, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    with httpx.stream("POST", live.url + path, json={**body, "stream": True}, timeout=120) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                out.append(json.loads(line[6:]))
    return out


def _progress(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["prompt_progress"] for e in events if "prompt_progress" in e]


def _check_sequence(progress: list[dict[str, Any]]) -> None:
    first, last = progress[0], progress[-1]
    assert first["processed"] == first["cache"] and first["time_ms"] >= 0
    assert last["processed"] == last["total"]
    for before, after in zip(progress, progress[1:], strict=False):
        assert after["total"] == before["total"] and after["cache"] == before["cache"]
        assert after["processed"] > before["processed"]
        assert after["time_ms"] >= before["time_ms"]
        assert after["processed"] - before["processed"] <= BATCH  # one report per batch
    # one report at the start, then one per batch of the uncached part
    assert len(progress) >= 1 + math.ceil((first["total"] - first["cache"]) / BATCH)


def _chat_text(events: list[dict[str, Any]]) -> str:
    return "".join(c["delta"].get("content") or "" for e in events for c in e.get("choices", []))


def test_chat_stream_reports_each_prompt_batch(small_batch_server) -> None:
    body = {"messages": LONG, "max_tokens": 8, "temperature": 0, "cache_prompt": False}
    events = _stream(small_batch_server, "/v1/chat/completions", {**body, "return_progress": True})
    progress = _progress(events)
    _check_sequence(progress)
    assert progress[0]["cache"] == 0 and progress[0]["total"] > 3 * BATCH
    plain = _stream(small_batch_server, "/v1/chat/completions", body)
    assert not _progress(plain)  # only when asked
    assert _chat_text(events) == _chat_text(plain)  # asking changes nothing else


def test_a_cached_prefix_shows_in_the_first_report(small_batch_server) -> None:
    body = {"messages": LONG, "max_tokens": 4, "temperature": 0, "return_progress": True}
    _stream(small_batch_server, "/v1/chat/completions", body)
    again = _progress(_stream(small_batch_server, "/v1/chat/completions", body))
    _check_sequence(again)
    assert again[0]["cache"] > 0


def test_native_completion_and_responses_streams(small_batch_server) -> None:
    prompt = "the quick brown fox jumps over the lazy dog " * 10
    native = _stream(
        small_batch_server,
        "/completion",
        {"prompt": prompt, "n_predict": 4, "return_progress": True, "cache_prompt": False},
    )
    chunks = [e for e in native if "prompt_progress" in e]
    _check_sequence(_progress(native))
    assert all(c["content"] == "" and c["stop"] is False for c in chunks)
    responses = _stream(
        small_batch_server,
        "/v1/responses",
        {"input": prompt, "max_output_tokens": 4, "return_progress": True},
    )
    reports = [e for e in responses if "prompt_progress" in e]
    assert reports and all(e["type"] == "response.in_progress" for e in reports)
    assert reports[-1]["prompt_progress"]["processed"] == reports[-1]["prompt_progress"]["total"]


def test_concurrent_streams_each_get_their_own_progress(small_batch_server) -> None:
    def run(k: int) -> tuple[list[dict[str, Any]], str]:
        messages = [{"role": "user", "content": f"Request {k}. " + LONG[0]["content"]}]
        body = {"messages": messages, "max_tokens": 6, "temperature": 0, "cache_prompt": False}
        events = _stream(
            small_batch_server, "/v1/chat/completions", {**body, "return_progress": True}
        )
        return _progress(events), _chat_text(events)

    alone = [run(k) for k in range(2)]
    with ThreadPoolExecutor(2) as pool:
        together = list(pool.map(run, range(2)))
    for (p_alone, text_alone), (p_together, text_together) in zip(alone, together, strict=True):
        _check_sequence(p_together)
        assert p_together[-1]["total"] == p_alone[-1]["total"]
        assert text_together == text_alone
