"""Three `llamactl serve` replicas behind Debian's HAProxy, each replica in a network namespace of
its own (veth pairs, only those addresses), configured by scripts/haproxy_config.py.

What a team scaling out relies on: a conversation's turns find their prompt cache, a chained
Responses turn finds the replica that stored its predecessor, a websocket stays put, a
draining replica finishes its streams while new requests go elsewhere, a killed one fails
only what it was running. Needs root, `ip netns` and `haproxy` (scripts/install-system-deps.sh
installs them); skipped otherwise.
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from processkit import NO_EOS
from prometheus_client.parser import text_string_to_metric_families
from websockets.sync.client import connect

sys.path.insert(0, str(Path(__file__).parents[1] / "scripts"))
import netns_cluster  # noqa: E402
from netns_cluster import Replica  # noqa: E402

MODEL_FIXTURES = {"cluster"}  # fixtures that load a model: users are slow

_REASON = netns_cluster.unavailable()
pytestmark = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")


def metrics(replica: Replica) -> dict[str, float]:
    """name -> value, parsed by Prometheus's own client library."""
    text = httpx.get(replica.url + "/metrics", timeout=10).text
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def running(replica: Replica) -> float:
    return metrics(replica)["vllm:num_requests_running"]


class Cluster:
    def __init__(self, inner: netns_cluster.Cluster) -> None:
        self.url, self.replicas = inner.url, inner.replicas

    def chat(self, messages, session: str | None = None, **fields) -> httpx.Response:
        headers = {"X-Session-Id": session} if session else {}
        body = {"messages": messages, "max_tokens": 8, "temperature": 0, **fields}
        url = self.url + "/v1/chat/completions"
        return httpx.post(url, json=body, headers=headers, timeout=180)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    serve_args = ("--parallel", "2", "--threads", "1", "--temperature", "0")
    env = {"LLAMACTL_SHUTDOWN_GRACE": "60"}  # a drained stream has time to finish
    root = tmp_path_factory.mktemp("cluster")
    with netns_cluster.cluster(root, serve_args=serve_args, env=env) as inner:
        yield Cluster(inner)


def _served(cluster: Cluster) -> list[float]:
    """Prompt tokens each replica has processed or taken from its cache, so far."""
    out = []
    for r in cluster.replicas:
        m = metrics(r)
        out.append(m["llamacpp:prompt_tokens_total"] + m["llamacpp:prompt_tokens_cached_total"])
    return out


# ------------------------------------------------------------------------------- affinity
def test_conversations_keep_their_prompt_cache_through_the_balancer(cluster: Cluster) -> None:
    """30 conversations of 4 turns, 6 at a time, keyed by X-Session-Id: from turn 2 on, every
    prompt is served from the cache of the replica that answered the turn before."""
    before = _served(cluster)

    def converse(n: int) -> list[tuple[int, int]]:
        messages = [{"role": "user", "content": f"Conversation {n}: name a colour."}]
        seen = []
        for turn in range(4):
            r = cluster.chat(messages, session=f"conversation-{n}")
            assert r.status_code == 200, r.text
            body = r.json()
            usage = body["usage"]
            seen.append((usage["prompt_tokens"], usage["prompt_tokens_details"]["cached_tokens"]))
            messages += [
                {"role": "assistant", "content": body["choices"][0]["message"]["content"]},
                {"role": "user", "content": f"And another one, number {turn + 2}?"},
            ]
        return seen

    with ThreadPoolExecutor(6) as pool:
        conversations = list(pool.map(converse, range(30)))
    for n, turns in enumerate(conversations):
        for (previous_prompt, _), (_, cached) in zip(turns, turns[1:], strict=False):
            assert cached >= previous_prompt, (n, turns)
    # and the 30 conversations were spread over every replica, not piled on one
    grew = [after - b for after, b in zip(_served(cluster), before, strict=True)]
    assert all(g > 0 for g in grew), grew


def test_a_chained_responses_turn_reaches_the_replica_that_stored_it(cluster: Cluster) -> None:
    """`previous_response_id` without any session header: each chain of 3 turns only works if
    every turn lands where the response it names is stored (elsewhere it is a 404)."""

    def chain(n: int) -> list[int]:
        previous = None
        cached = []
        for turn in range(3):
            body = {"input": f"Chain {n}, turn {turn}: say a word.", "max_output_tokens": 8}
            if previous:
                body["previous_response_id"] = previous
            r = httpx.post(cluster.url + "/v1/responses", json=body, timeout=180)
            assert r.status_code == 200, r.text
            assert r.headers["X-Response-Id"] == r.json()["id"]
            previous = r.json()["id"]
            cached.append(r.json()["usage"]["input_tokens_details"]["cached_tokens"])
        return cached

    with ThreadPoolExecutor(4) as pool:
        chains = list(pool.map(chain, range(8)))
    assert all(c[1] > 0 and c[2] > c[1] for c in chains), chains


def test_a_streamed_response_names_itself_before_its_body(cluster: Cluster) -> None:
    body = {"input": "Say one word.", "max_output_tokens": 4, "stream": True}
    with httpx.stream("POST", cluster.url + "/v1/responses", json=body, timeout=180) as r:
        rid = r.headers["X-Response-Id"]
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1]["response"]["id"] == rid
    again = {"input": "Another.", "max_output_tokens": 4, "previous_response_id": rid}
    assert httpx.post(cluster.url + "/v1/responses", json=again, timeout=180).status_code == 200


def test_a_realtime_session_stays_on_one_replica(cluster: Cluster) -> None:
    """Two text turns of one websocket session: both answered by the same replica (the one
    whose generated-token counter moved), the second with the first in its context."""

    def predicted() -> list[float]:
        return [metrics(r)["llamacpp:tokens_predicted_total"] for r in cluster.replicas]

    url = cluster.url.replace("http://", "ws://") + "/v1/realtime"
    moved: list[int] = []
    with connect(url, open_timeout=30, max_size=None) as ws:

        def until(kind: str) -> dict:
            while True:
                event = json.loads(ws.recv(timeout=180))
                assert event["type"] != "error", event
                if event["type"] == kind:
                    return event

        until("session.created")
        for question in ("My name is Ada.", "What is my name?"):
            item = {"type": "message", "role": "user"}
            item["content"] = [{"type": "input_text", "text": question}]
            ws.send(json.dumps({"type": "conversation.item.create", "item": item}))
            before = predicted()
            ws.send(
                json.dumps(
                    {
                        "type": "response.create",
                        "response": {"output_modalities": ["text"], "max_output_tokens": 12},
                    }
                )
            )
            done = until("response.done")["response"]
            assert done["status"] in ("completed", "incomplete")
            after = predicted()
            moved += [i for i, (a, b) in enumerate(zip(after, before, strict=True)) if a > b]
    assert len(moved) == 2 and moved[0] == moved[1], moved


def test_metrics_are_prometheus_text_and_move_with_load(cluster: Cluster) -> None:
    names = {
        "vllm:num_requests_waiting",
        "vllm:num_requests_running",
        "vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
        "llamacpp:requests_processing",
        "llamacpp:prompt_tokens_total",
        "llamacpp:tokens_predicted_total",
    }
    for r in cluster.replicas:
        assert names <= set(metrics(r)), r.name
    # a long stream on some replica: that replica's running gauge shows it while it runs
    with _long_stream(cluster, tokens=200) as lines:
        next(lines)
        assert sum(running(r) for r in cluster.replicas) >= 1
    deadline = time.monotonic() + 30
    while sum(running(r) for r in cluster.replicas) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sum(running(r) for r in cluster.replicas) == 0


# ------------------------------------------------------------------------- failures
@contextlib.contextmanager
def _long_stream(cluster: Cluster, tokens: int, session: str | None = None) -> Iterator:
    """A streamed chat that keeps going for `tokens` tokens; yields its data lines."""
    body = {
        "messages": [{"role": "user", "content": "Tell me a story."}],
        "max_tokens": tokens,
        "stream": True,
        "logit_bias": NO_EOS,
    }
    headers = {"X-Session-Id": session} if session else {}
    with httpx.stream(
        "POST", cluster.url + "/v1/chat/completions", json=body, headers=headers, timeout=180
    ) as r:
        assert r.status_code == 200
        yield (line for line in r.iter_lines() if line.startswith("data: "))


def _busy(cluster: Cluster) -> Replica:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for r in cluster.replicas:
            if r.proc.poll() is None and running(r) > 0:
                return r
        time.sleep(0.05)
    pytest.fail("no replica shows the stream running")


def _all_answered(cluster: Cluster, n: int) -> list[int]:
    with ThreadPoolExecutor(4) as pool:
        codes = list(
            pool.map(
                lambda i: (
                    cluster.chat(
                        [{"role": "user", "content": f"Question {i}?"}], session=f"after-{i}"
                    ).status_code
                ),
                range(n),
            )
        )
    return codes


def test_a_draining_replica_finishes_its_stream_while_others_take_new_requests(
    cluster: Cluster,
) -> None:
    with _long_stream(cluster, tokens=120) as lines:
        first = next(lines)
        assert first
        draining = _busy(cluster)
        draining.proc.send_signal(signal.SIGTERM)
        # while it drains, new requests (any session key) are answered elsewhere
        assert _all_answered(cluster, 6) == [200] * 6
        rest = list(lines)
    assert rest[-1] == "data: [DONE]"
    finish = json.loads(rest[-2][6:])["choices"][0]["finish_reason"]
    assert finish == "length"  # the whole answer, not cut by the stop
    assert draining.proc.wait(60) == 0
    assert "Traceback" not in draining.log.read_text()


def test_a_killed_replica_fails_only_its_own_streams(cluster: Cluster) -> None:
    alive = [r for r in cluster.replicas if r.proc.poll() is None]
    assert len(alive) >= 2
    results: dict[int, str] = {}

    def stream(i: int) -> None:
        try:
            with _long_stream(cluster, tokens=150, session=f"kill-{i}") as lines:
                last = list(lines)[-1]
            results[i] = "done" if last == "data: [DONE]" else "cut"
        except httpx.HTTPError as exc:
            results[i] = f"error: {type(exc).__name__}"

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    victim = _busy(cluster)
    seen = metrics(victim)  # in flight there: generating, or queued for a slot
    on_victim = seen["vllm:num_requests_running"] + seen["vllm:num_requests_waiting"]
    victim.proc.send_signal(signal.SIGKILL)
    victim.proc.wait(10)
    for t in threads:
        t.join(180)
    failed = [v for v in results.values() if v != "done"]
    assert 1 <= len(failed) <= on_victim, results
    # the requests after it are answered: refused connections are retried on a live replica
    assert _all_answered(cluster, 6) == [200] * 6
