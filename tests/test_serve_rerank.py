"""Reranking (`--rerank`) on a real rank-head GGUF (a tiny BERT cross-encoder llama.cpp loads):
the pair llama-server builds, scores against llama-cpp-python's own rank pooling, Jina's and
TEI's shapes, the four routes, bad input, batching and concurrency, and the 501s."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import llama_cpp
import numpy as np
import pytest
from serverkit import LiveServer, run_server

from llamactl import Model, has_rank_head, rerank_template, rerank_tokens

MODEL_FIXTURES = {"ranker", "reference"}

QUERY = "Machine learning is"
DOCS = [
    "A machine is a physical system.",
    "Learning is the process of acquiring new understanding.",
    "Machine learning is a field of study in artificial intelligence.",
    "Paris, capitale de la France, est une grande ville.",
]
CLS, SEP = 2, 3  # the fixture's [CLS] (BOS) and [SEP]


@pytest.fixture(scope="module")
def ranker(rank_gguf) -> Iterator[LiveServer]:
    with run_server(model=str(rank_gguf), rerank=True, parallel=1) as live:
        yield live


@pytest.fixture(scope="module")
def reference(rank_gguf) -> Iterator[llama_cpp.Llama]:
    """llama-cpp-python's high-level rank pooling on the same GGUF (flash attention off, as
    llamactl's embedding context runs)."""
    llm = llama_cpp.Llama(
        str(rank_gguf),
        embedding=True,
        pooling_type=llama_cpp.LLAMA_POOLING_TYPE_RANK,
        n_ctx=512,
        n_batch=512,
        n_ubatch=512,
        flash_attn=False,
        verbose=False,
    )
    yield llm
    llm.close()


def post(live: LiveServer, body: dict, path: str = "/v1/rerank") -> httpx.Response:
    return httpx.post(live.url + path, json=body, timeout=120)


def ranked(live: LiveServer, docs: list[str], query: str = QUERY) -> dict[int, float]:
    r = post(live, {"query": query, "documents": docs})
    assert r.status_code == 200, r.text
    return {item["index"]: item["relevance_score"] for item in r.json()["results"]}


def reference_scores(llm: llama_cpp.Llama, pairs: list[list[int]]) -> list[float]:
    """The reference's scores of token sequences: its `embed` batches them as one decode;
    its tokenizer is bypassed so it scores exactly the pairs given."""
    by_text = {f"pair{i}": tokens for i, tokens in enumerate(pairs)}
    llm.tokenize = lambda text, add_bos=True, special=False: by_text[text.decode()]  # type: ignore[method-assign]
    rows = llm.embed(list(by_text), normalize=False)
    return [float(row[0]) for row in rows]


def test_the_pair_is_bos_query_sep_document(ranker) -> None:
    model = ranker.state.embeddings.model
    assert has_rank_head(model)
    plain = [model.tokenize(t, add_special=False, parse_special=False) for t in (QUERY, DOCS[0])]
    # the vocab adds BOS and SEP, not EOS (a BERT WordPiece vocab): [CLS] q [SEP] d
    assert rerank_tokens(model, QUERY, DOCS[0]) == [CLS, *plain[0], SEP, *plain[1]]
    r = post(ranker, {"query": QUERY, "documents": DOCS[:2]}).json()
    n = sum(len(rerank_tokens(model, QUERY, d)) for d in DOCS[:2])
    assert r["usage"] == {"prompt_tokens": n, "total_tokens": n}


def test_scores_match_llama_cpp_python(ranker, reference) -> None:
    model = ranker.state.embeddings.model
    pairs = [rerank_tokens(model, QUERY, d) for d in DOCS]
    # the reference tokenizes the parts itself: same ids
    own = reference.tokenize(QUERY.encode(), add_bos=False, special=False)
    assert pairs[0][1 : 1 + len(own)] == own
    expected = reference_scores(reference, pairs)
    got = ranked(ranker, DOCS)
    assert np.allclose([got[i] for i in range(len(DOCS))], expected, atol=1e-5)
    assert len(set(expected)) == len(DOCS)  # the head tells the pairs apart


def test_jina_shape_sorted_best_first(ranker) -> None:
    r = post(ranker, {"query": QUERY, "documents": DOCS, "model": "jina-reranker"})
    got = r.json()
    assert got["object"] == "list" and got["model"] == "jina-reranker"
    scores = [item["relevance_score"] for item in got["results"]]
    assert scores == sorted(scores, reverse=True)
    assert sorted(item["index"] for item in got["results"]) == [0, 1, 2, 3]
    assert all(set(item) == {"index", "relevance_score"} for item in got["results"])


def test_top_n_and_return_documents(ranker) -> None:
    full = post(ranker, {"query": QUERY, "documents": DOCS}).json()["results"]
    for top_n, n in ((2, 2), (4, 4), (99, 4), (0, 0)):
        body = {"query": QUERY, "documents": DOCS, "top_n": top_n}
        assert post(ranker, body).json()["results"] == full[:n]
    with_docs = post(ranker, {"query": QUERY, "documents": DOCS, "return_documents": True})
    for item in with_docs.json()["results"]:
        assert item["document"] == {"text": DOCS[item["index"]]}


def test_tei_shape(ranker) -> None:
    jina = post(ranker, {"query": QUERY, "documents": DOCS}).json()["results"]
    tei = post(ranker, {"query": QUERY, "texts": DOCS}, path="/rerank").json()
    assert [(t["index"], t["score"]) for t in tei] == [
        (j["index"], j["relevance_score"]) for j in jina
    ]
    top = post(ranker, {"query": QUERY, "texts": DOCS, "top_n": 2, "return_text": True}).json()
    assert len(top) == 2 and all(t["text"] == DOCS[t["index"]] for t in top)


def test_every_route_answers_alike(ranker) -> None:
    body = {"query": QUERY, "documents": DOCS}
    answers = [post(ranker, body, path).json() for path in ("/v1/rerank", "/rerank")]
    answers += [post(ranker, body, path).json() for path in ("/reranking", "/v1/reranking")]
    assert all(a == answers[0] for a in answers)


@pytest.mark.parametrize(
    "body",
    [
        {"query": QUERY, "documents": []},
        {"query": QUERY, "documents": None},
        {"query": QUERY, "documents": 123},
        {"query": QUERY, "documents": [1, 2, 3]},
        {"query": QUERY},
        {"documents": DOCS},
        {"query": 5, "documents": DOCS},
        {"query": QUERY, "documents": DOCS, "top_n": -1},
        {"query": QUERY, "documents": ["word " * 600]},  # longer than the physical batch
    ],
)
def test_bad_input_is_a_400(ranker, body) -> None:
    r = post(ranker, body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["type"] == "invalid_request_error"


def test_a_batch_scores_as_its_documents_alone(ranker) -> None:
    together = ranked(ranker, DOCS)
    alone = [ranked(ranker, [d])[0] for d in DOCS]
    # one decode for four pairs or four decodes: float summation order only
    assert np.allclose([together[i] for i in range(4)], alone, atol=1e-5)


def test_concurrent_requests_score_as_alone(ranker) -> None:
    asks = [DOCS, DOCS[::-1], DOCS[1:3], [DOCS[3]], DOCS[:2], DOCS[2:]] * 2
    alone = [ranked(ranker, docs) for docs in asks]
    with ThreadPoolExecutor(len(asks)) as pool:
        together = list(pool.map(lambda docs: ranked(ranker, docs), asks))
    assert together == alone


def test_embeddings_only_for_an_encoder(ranker) -> None:
    """A BERT reranker has no KV cache: it serves scores (and tokenizing), no text."""
    assert ranker.state.engine is None
    chat = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
    r = httpx.post(ranker.v1 + "/chat/completions", json=chat, timeout=30)
    assert r.status_code == 501
    tokens = httpx.post(ranker.url + "/tokenize", json={"content": "machine"}, timeout=30)
    assert tokens.json()["tokens"] == ranker.state.embeddings.model.tokenize(
        "machine", add_special=False
    )


def test_without_rerank_a_501_names_the_flag(server) -> None:
    r = post(server, {"query": QUERY, "documents": DOCS}, path="/rerank")
    assert r.status_code == 501
    error = r.json()["error"]
    assert error["type"] == "not_supported_error" and "--rerank" in error["message"]


@pytest.mark.slow
def test_a_model_without_a_rank_head_is_not_reranked() -> None:
    with run_server(rerank=True, parallel=1) as live:  # SmolLM2: no cls / cls.output
        assert live.state.embeddings is None
        r = post(live, {"query": QUERY, "documents": DOCS})
        assert r.status_code == 501
        assert "no rank head" in r.json()["error"]["message"]
        chat = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
        assert httpx.post(live.v1 + "/chat/completions", json=chat, timeout=60).status_code == 200


@pytest.mark.slow
def test_a_rerank_template_is_filled_in(tmp_path) -> None:
    """Qwen3-Reranker's way: the model's `rerank` template, special tokens parsed, none added."""
    from fixture_ggufs import build_rank_bert

    template = "[CLS]query: {query}[SEP]doc: {document}[SEP]"
    path = build_rank_bert(tmp_path / "templated.gguf", rerank_template=template)
    model = Model(path, vocab_only=True)
    try:
        assert rerank_template(model) == template
        filled = "[CLS]query: the city[SEP]doc: paris[SEP]"
        want = model.tokenize(filled, add_special=False, parse_special=True)
        assert want[0] == CLS and want.count(SEP) == 2
        assert rerank_tokens(model, "the city", "paris") == want
    finally:
        model.close()
