"""Embeddings and rerank under hostile load (issue #31, row 4): a request's inputs and tokens are
bounded (a 400 naming the limit and its flag, before any work is queued), and a client that
hangs up stops its request between inputs, so the next request gets the embedding worker."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterator

import httpx
import pytest
from serverkit import LiveServer, run_server

from llamactl.config import Settings

MODEL_FIXTURES = {"embedder", "ranker", "big_ranker"}

INPUTS, TOKENS = 300, 6000  # this module's limits, small enough to reach cheaply
QUERY = "Machine learning is"


@pytest.fixture(scope="module")
def embedder() -> Iterator[LiveServer]:
    with run_server(
        parallel=1,
        embedding=True,
        pooling="mean",
        max_embedding_inputs=INPUTS,
        max_embedding_tokens=TOKENS,
    ) as live:
        yield live


@pytest.fixture(scope="module")
def big_ranker(rank_gguf) -> Iterator[LiveServer]:
    limits = {"max_embedding_inputs": 2048, "max_embedding_tokens": 10**7}
    with run_server(model=str(rank_gguf), rerank=True, parallel=1, **limits) as live:
        yield live


@pytest.fixture(scope="module")
def ranker(rank_gguf) -> Iterator[LiveServer]:
    with run_server(
        model=str(rank_gguf),
        rerank=True,
        parallel=1,
        max_embedding_inputs=8,
        max_embedding_tokens=200,
    ) as live:
        yield live


def post(live: LiveServer, path: str, body: dict) -> httpx.Response:
    return httpx.post(live.url + path, json=body, timeout=300)


def refusal(r: httpx.Response) -> str:
    assert r.status_code == 400, r.text[:500]
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == 400
    return error["message"]


def test_the_defaults_are_the_documented_ones() -> None:
    settings = Settings()
    assert (settings.max_embedding_inputs, settings.max_embedding_tokens) == (2048, 4096)


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/v1/embeddings", "input"),
        ("/v1/embeddings", "content"),
        ("/embedding", "content"),
        ("/embeddings", "content"),
    ],
)
def test_too_many_inputs_are_refused_before_any_work(embedder, path, field) -> None:
    engine = embedder.state.embeddings
    before = engine.decodes
    message = refusal(post(embedder, path, {field: ["a"] * (INPUTS + 1)}))
    assert message == (
        f"Field '{field}': {INPUTS + 1} inputs is over this server's limit of {INPUTS} "
        "(--max-embedding-inputs or LLAMACTL_MAX_EMBEDDING_INPUTS raises it)"
    )
    assert engine.decodes == before
    assert post(embedder, path, {field: ["a"] * INPUTS}).status_code == 200  # at the limit


def test_too_many_tokens_are_refused_before_any_work(embedder) -> None:
    engine = embedder.state.embeddings
    before = engine.decodes
    text = "word " * 400  # ~400 tokens, inside one physical batch
    n = len(engine.model.tokenize(text, add_special=True))
    count = TOKENS // n + 1
    message = refusal(post(embedder, "/v1/embeddings", {"input": [text] * count}))
    assert f"{count * n} tokens is over this server's limit of {TOKENS}" in message
    assert "--max-embedding-tokens or LLAMACTL_MAX_EMBEDDING_TOKENS" in message
    ids = [[7] * 300] * (TOKENS // 300 + 1)  # token ids count the same
    assert "--max-embedding-tokens" in refusal(post(embedder, "/embedding", {"content": ids}))
    assert engine.decodes == before


def _send_and_hang_up(live: LiveServer, path: str, body: dict, started: int) -> None:
    """Send `body` on a raw connection, wait until the server has done `started` decodes of
    it, then close the connection without reading the answer."""
    engine = live.state.embeddings
    raw = json.dumps(body).encode()
    host, port = live.url.removeprefix("http://").split(":")
    before = engine.decodes
    with socket.create_connection((host, int(port))) as conn:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(raw)}\r\n\r\n"
        )
        conn.sendall(head.encode() + raw)
        conn.setblocking(False)
        while engine.decodes < before + started:  # the work is under way
            with contextlib.suppress(BlockingIOError):
                raise AssertionError(f"answered before it started: {conn.recv(500)!r}")
            time.sleep(0.01)


def test_a_client_that_hangs_up_stops_its_embeddings(embedder) -> None:
    """The big request stops between inputs; the small one after it is answered without
    waiting for the rest (it runs on the same worker, so it ends only once the big one has)."""
    engine = embedder.state.embeddings
    start = engine.decodes
    big = [f"Sentence number {i} about nothing at all." for i in range(INPUTS)]
    _send_and_hang_up(embedder, "/v1/embeddings", {"input": big}, started=3)
    small = post(embedder, "/v1/embeddings", {"input": "after"})
    assert small.status_code == 200 and len(small.json()["data"]) == 1
    done = engine.decodes - start - 1  # the big request's decodes
    assert 3 <= done < INPUTS / 2, done


# --------------------------------------------------------------------------------- rerank
@pytest.mark.parametrize("path", ["/v1/rerank", "/rerank", "/reranking", "/v1/reranking"])
def test_too_many_documents_are_refused(ranker, path) -> None:
    before = ranker.state.embeddings.decodes
    message = refusal(post(ranker, path, {"query": QUERY, "documents": ["x"] * 9}))
    assert message == (
        "Field 'documents': 9 documents is over this server's limit of 8 "
        "(--max-embedding-inputs or LLAMACTL_MAX_EMBEDDING_INPUTS raises it)"
    )
    message = refusal(post(ranker, path, {"query": QUERY, "texts": ["x"] * 9}))
    assert message.startswith("Field 'texts': 9 documents is over")
    assert post(ranker, path, {"query": QUERY, "documents": ["x"] * 8}).status_code == 200
    assert ranker.state.embeddings.decodes == before + 1  # only the request at the limit ran


def test_too_many_tokens_in_the_pairs_are_refused(ranker) -> None:
    before = ranker.state.embeddings.decodes
    query = "learning " * 60  # each pair repeats the query
    message = refusal(post(ranker, "/v1/rerank", {"query": query, "documents": ["a b"] * 8}))
    assert message.startswith("Field 'documents': at least ")
    assert "tokens is over this server's limit of 200 (--max-embedding-tokens" in message
    assert ranker.state.embeddings.decodes == before


def test_a_client_that_hangs_up_stops_its_rerank(big_ranker) -> None:
    engine = big_ranker.state.embeddings
    start = engine.decodes
    document = "machine learning " * 150  # a pair of 300+ tokens: one pair a decode
    body = {"query": QUERY, "documents": [document] * 2048}
    _send_and_hang_up(big_ranker, "/v1/rerank", body, started=3)
    small = post(big_ranker, "/v1/rerank", {"query": QUERY, "documents": ["x"]})
    assert small.status_code == 200 and len(small.json()["results"]) == 1
    done = engine.decodes - start - 1
    assert 3 <= done < 1024, done
