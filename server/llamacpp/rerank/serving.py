"""Rerank requests: (query, document) pairs → the rank head's scores → sorted results.

Each pair is tokenized as llama-server does (`rerank_tokens`: the model's rerank template, or
BOS / EOS / SEP around the two texts); the pairs of one request are scored in as few decodes
as fit the context's physical batch. A request is bounded (--max-embedding-inputs documents,
--max-embedding-tokens over all its pairs: a 400 before any work is queued) and stops between
decodes when its client hangs up.
"""

from __future__ import annotations

from typing import Any

from fastapi import Request
from starlette.responses import Response

from llamactl import rerank_tokens

from ...common import check_model
from ...disconnect import CLIENT_CLOSED_REQUEST, result_unless_disconnected
from ...embedding_limits import EmbeddingLimits
from ...errors import bad_request
from ...prepare import off_loop
from ...state import ServerState
from .protocol import RerankRequest

__all__ = ["rerank"]


def _pairs(state: ServerState, body: RerankRequest) -> tuple[str, list[str], list[list[int]]]:
    """(the documents' field, the documents, each pair's tokens), checked as llama-server
    checks them."""
    if body.query is None:
        raise bad_request('"query" must be provided')
    field = "documents" if body.documents is not None else "texts"
    documents = body.documents if body.documents is not None else body.texts
    if not documents:
        raise bad_request('"documents" must be a non-empty string array')
    limits = EmbeddingLimits.from_settings(state.settings)
    limits.check_inputs(len(documents), field, "documents")
    model = state.require_text_model()
    pairs, total = [], 0
    for document in documents:  # the query is in every pair: stop counting once over
        pairs.append(rerank_tokens(model, body.query, document))
        total += len(pairs[-1])
        limits.check_tokens(total, field, at_least=len(pairs) < len(documents))
    return field, documents, pairs


async def rerank(state: ServerState, body: RerankRequest, request: Request) -> Any:
    """The answer to one rerank request: Jina's object, or TEI's list for `texts` (a 499 for
    the access log when the client hung up first)."""
    embedder = state.require_rerank()
    check_model(state, body.model)
    field, documents, pairs = await off_loop(_pairs, state, body)
    names = [f"{field}.{i}" for i in range(len(pairs))]
    scores = await result_unless_disconnected(request, embedder.submit_scores(pairs, names))
    if scores is None:
        return Response(status_code=CLIENT_CLOSED_REQUEST)
    tei = field == "texts"
    label = "score" if tei else "relevance_score"
    results: list[dict[str, Any]] = []
    for i in sorted(range(len(scores)), key=lambda i: -scores[i]):  # stable: ties keep order
        item: dict[str, Any] = {"index": i, label: scores[i]}
        if tei and body.return_text:
            item["text"] = documents[i]
        if not tei and body.return_documents:
            item["document"] = {"text": documents[i]}
        results.append(item)
    results = results[: body.top_n] if body.top_n is not None else results
    if tei:
        return results
    n_tokens = sum(len(p) for p in pairs)
    return {
        "model": body.model or state.model_id,
        "object": "list",
        "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
        "results": results,
    }
