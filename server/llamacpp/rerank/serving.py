"""Rerank requests: (query, document) pairs → the rank head's scores → sorted results.

Each pair is tokenized as llama-server does (`rerank_tokens`: the model's rerank template, or
BOS / EOS / SEP around the two texts); the pairs of one request are scored in as few decodes
as fit the context's physical batch.
"""

from __future__ import annotations

import asyncio
from typing import Any

from llamactl import rerank_tokens

from ...common import check_model
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
    model = state.require_text_model()
    return field, documents, [rerank_tokens(model, body.query, d) for d in documents]


async def rerank(state: ServerState, body: RerankRequest) -> Any:
    """The answer to one rerank request: Jina's object, or TEI's list for `texts`."""
    embedder = state.require_rerank()
    check_model(state, body.model)
    field, documents, pairs = await off_loop(_pairs, state, body)
    names = [f"{field}.{i}" for i in range(len(pairs))]
    scores = await asyncio.wrap_future(embedder.submit_scores(pairs, names))
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
