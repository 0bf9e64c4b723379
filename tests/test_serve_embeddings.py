"""Embeddings on the real model (`--embedding --pooling mean`): OpenAI's `/v1/embeddings` (also
through the OpenAI SDK, which asks for base64), llama-server's native `/embedding`, its input
forms and normalizations, against llama-cpp-python's own embedding path, and concurrency."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import openai
import pytest
from serverkit import LiveServer, run_server

MODEL_FIXTURES = {"embedder"}

TEXTS = ["The cat sat on the mat.", "Stock markets fell sharply today.", "A kitten naps."]


@pytest.fixture(scope="module")
def embedder() -> Iterator[LiveServer]:
    with run_server(parallel=2, embedding=True, pooling="mean") as live:
        yield live


def embed(live: LiveServer, body: dict, path: str = "/v1/embeddings") -> httpx.Response:
    return httpx.post(live.url + path, json=body, timeout=120)


def vectors(live: LiveServer, inputs: object) -> list[np.ndarray]:
    r = embed(live, {"input": inputs})
    assert r.status_code == 200, r.text
    return [np.array(d["embedding"]) for d in r.json()["data"]]


def test_one_text(embedder) -> None:
    r = embed(embedder, {"input": TEXTS[0], "model": "text-embedding-3-small"})
    got = r.json()
    assert got["object"] == "list" and got["model"] == "text-embedding-3-small"
    [item] = got["data"]
    assert item["object"] == "embedding" and item["index"] == 0
    v = np.array(item["embedding"])
    assert v.shape == (embedder.state.engine.model.info.n_embd,)
    assert abs(np.linalg.norm(v) - 1.0) < 1e-5  # euclidean by default
    n = len(embedder.state.engine.model.tokenize(TEXTS[0], add_special=True))
    assert got["usage"] == {"prompt_tokens": n, "total_tokens": n}


def test_a_batch_equals_its_parts_and_tokens_equal_text(embedder) -> None:
    together = vectors(embedder, TEXTS)
    alone = [vectors(embedder, t)[0] for t in TEXTS]
    assert all(np.array_equal(a, b) for a, b in zip(together, alone, strict=True))
    ids = embedder.state.engine.model.tokenize(TEXTS[1], add_special=True)
    assert np.array_equal(vectors(embedder, ids)[0], alone[1])
    assert np.array_equal(vectors(embedder, [ids, TEXTS[2]])[1], alone[2])


def test_the_openai_sdk_reads_base64(embedder) -> None:
    client = openai.OpenAI(base_url=embedder.v1, api_key="none")
    got = client.embeddings.create(model="any", input=TEXTS[:2])  # the SDK asks for base64
    assert [d.index for d in got.data] == [0, 1]
    assert np.allclose(np.array(got.data[0].embedding), vectors(embedder, TEXTS[0])[0])
    raw = embed(embedder, {"input": TEXTS[0], "encoding_format": "base64"}).json()["data"][0]
    decoded = np.frombuffer(base64.b64decode(raw["embedding"]), dtype="<f4")
    assert raw["encoding_format"] == "base64"
    assert np.array_equal(decoded, vectors(embedder, TEXTS[0])[0].astype(np.float32))


def test_native_shape_and_normalizations(embedder) -> None:
    got = embed(embedder, {"content": TEXTS[0]}, path="/embedding").json()
    assert isinstance(got, list) and got[0]["index"] == 0
    [vector] = got[0]["embedding"]  # a list of one pooled vector
    assert np.allclose(vector, vectors(embedder, TEXTS[0])[0])
    assert embed(embedder, {"content": TEXTS[0]}, path="/embeddings").json() == got
    assert embed(embedder, {"content": TEXTS[0]}).json() == got  # content: native, as llama-server
    raw = np.array(
        embed(embedder, {"content": TEXTS[0], "embd_normalize": -1}).json()[0]["embedding"][0]
    )
    assert abs(np.linalg.norm(raw) - 1.0) > 1e-3
    assert np.allclose(raw / np.linalg.norm(raw), vector, atol=1e-6)
    taxicab = np.array(
        embed(embedder, {"input": TEXTS[0], "embd_normalize": 1}).json()["data"][0]["embedding"]
    )
    assert abs(np.abs(taxicab).sum() - 1.0) < 1e-5


def test_matches_llama_cpp_pythons_embeddings(embedder) -> None:
    """The reference: llama-cpp-python's Llama class, same file, mean pooling."""
    import llama_cpp

    path = str(embedder.state.model_path)
    ref = llama_cpp.Llama(
        path,
        embedding=True,
        pooling_type=llama_cpp.LLAMA_POOLING_TYPE_MEAN,
        n_ctx=512,
        n_threads=2,
        verbose=False,
    )
    try:
        expected = np.array(ref.embed(TEXTS[0], normalize=True))
    finally:
        ref.close()
    got = vectors(embedder, TEXTS[0])[0]
    assert np.max(np.abs(got - expected.reshape(got.shape))) < 1e-5


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"input": ""}, "empty"),
        ({"input": "x " * 2000}, "--ubatch-size"),
        ({}, '"input" or "content"'),
        ({"input": "x", "encoding_format": "int8"}, "'encoding_format'"),
        ({"input": "x", "dimensions": 64}, "'dimensions'"),
        ({"input": [1, 10**9]}, "'input.1'"),
        ({"input": ["ok", ""]}, "'input.1'"),
    ],
)
def test_bad_requests_are_a_400(embedder, body, needle) -> None:
    r = embed(embedder, body)
    assert r.status_code == 400, r.text
    assert needle in r.json()["error"]["message"]


def test_a_server_without_embeddings_says_how_to_get_them(server) -> None:
    r = embed(server, {"input": "hi"})
    assert r.status_code == 501
    assert "--embeddings" in r.json()["error"]["message"]
    assert embed(server, {"content": "hi"}, path="/embedding").status_code == 501


def test_concurrent_sessions_get_their_own_vectors(embedder) -> None:
    inputs = [f"{t} ({i})" for i, t in enumerate(TEXTS * 3)]
    alone = [vectors(embedder, t)[0] for t in inputs]
    with ThreadPoolExecutor(6) as pool:
        together = list(pool.map(lambda t: vectors(embedder, t)[0], inputs))
    assert all(np.array_equal(a, b) for a, b in zip(together, alone, strict=True))


def test_generation_still_works_beside_embeddings(embedder) -> None:
    body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "temperature": 0}
    r = httpx.post(embedder.v1 + "/chat/completions", json=body, timeout=60)
    assert r.status_code == 200
