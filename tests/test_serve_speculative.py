"""Speculative decoding through the server: the same answer, draft timings, /metrics."""

from __future__ import annotations

import httpx
import pytest
from serverkit import run_server

pytestmark = pytest.mark.slow  # every test here loads a model

CODE = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n"
BODY = {
    "messages": [{"role": "user", "content": f"Rewrite this code with type hints:\n{CODE}"}],
    "max_tokens": 24,
    "temperature": 0,
}


def test_prompt_lookup_keeps_the_answer_and_reports_drafts():
    with run_server(parallel=2) as plain:
        r = httpx.post(plain.url + "/v1/chat/completions", json=BODY, timeout=120).json()
        expected = r["choices"][0]["message"]["content"]
        assert "draft_n" not in r["timings"]
    with run_server(
        parallel=2, spec_type=["ngram-simple"], spec_draft_n_max=6, metrics=True
    ) as srv:
        r = httpx.post(srv.url + "/v1/chat/completions", json=BODY, timeout=120).json()
        assert r["choices"][0]["message"]["content"] == expected
        t = r["timings"]
        assert t["draft_n"] > 0 and 0 <= t["draft_n_accepted"] <= t["draft_n"]
        metrics = httpx.get(srv.url + "/metrics", timeout=10).text
        assert f'llamactl:spec_tokens_drafted_total{{type="ngram-simple"}} {t["draft_n"]}' in (
            metrics
        )
        assert 'llamactl:spec_tokens_accepted_total{type="ngram-simple"}' in metrics
