"""`POST /v1/chat/completions/control` (spec §9): end a running completion's reasoning.

On `thinking_server` the template opens a <think> block, so SmolLM2's output starts as
reasoning; its end-of-turn tokens are biased away so it keeps generating after the forced
end of thinking and an answer (content) must follow.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

HI = [{"role": "user", "content": "What is 2+2?"}]


def control(live, body: Any, path: str = "/v1/chat/completions/control") -> httpx.Response:
    if body is None:
        return httpx.post(live.url + path, timeout=30)
    return httpx.post(live.url + path, json=body, timeout=30)


def eog_bias(live) -> dict[str, float]:
    model = live.state.engine.model
    return {str(t): -100 for t in range(256) if model.is_eog(t)}


def chunks(response: httpx.Response) -> Iterator[dict[str, Any]]:
    for line in response.iter_lines():
        if line.startswith("data: {"):
            yield json.loads(line[6:])


def stream_and_control(live, body: dict[str, Any], after: int = 3) -> tuple[Any, list[dict]]:
    """Stream `body`; after `after` reasoning deltas of choice 0, post the control request.
    Returns the control answer and every chunk."""
    seen: list[dict] = []
    answer = None
    reasoning = 0
    with httpx.stream(
        "POST", live.v1 + "/chat/completions", json={**body, "stream": True}, timeout=120
    ) as r:
        assert r.status_code == 200
        for chunk in chunks(r):
            seen.append(chunk)
            if answer is not None or not chunk["choices"]:
                continue
            choice = chunk["choices"][0]
            if choice["index"] == 0 and choice["delta"].get("reasoning_content"):
                reasoning += 1
                if reasoning == after:
                    answer = control(live, {"id": chunk["id"], "action": "reasoning_end"})
                    seen.append({"control": True})
    return answer, seen


def deltas_after_control(seen: list[dict], key: str, index: int = 0) -> str:
    at = next(i for i, c in enumerate(seen) if c.get("control"))
    return "".join(
        c["choices"][0]["delta"].get(key) or ""
        for c in seen[at + 1 :]
        if c.get("choices") and c["choices"][0]["index"] == index
    )


def test_reasoning_end_then_content_follows(thinking_server):
    body = {
        "messages": HI,
        "max_tokens": 40,
        "temperature": 0,
        "reasoning_control": True,
        "logit_bias": eog_bias(thinking_server),
    }
    answer, seen = stream_and_control(thinking_server, body)
    assert answer is not None and answer.status_code == 200
    assert answer.json() == {"success": True}
    assert deltas_after_control(seen, "content")
    finish = [c for c in seen if c.get("choices") and c["choices"][0]["finish_reason"]]
    assert finish[0]["choices"][0]["finish_reason"] == "length"
    # once it finished, the id is no longer live
    again = control(thinking_server, {"id": seen[0]["id"], "action": "reasoning_end"})
    assert again.json() == {"success": False, "message": "no active completion for this id"}


def test_reasoning_end_reaches_every_choice(thinking_server):
    """Beyond llama-server (which ends only the first matching slot): all n choices end."""
    body = {
        "messages": HI,
        "max_tokens": 40,
        "temperature": 0,
        "n": 2,
        "reasoning_control": True,
        "logit_bias": eog_bias(thinking_server),
    }
    answer, seen = stream_and_control(thinking_server, body, after=2)
    assert answer.json() == {"success": True}
    assert deltas_after_control(seen, "content", 0)
    assert deltas_after_control(seen, "content", 1)


def test_control_needs_reasoning_control(thinking_server):
    body = {"messages": HI, "max_tokens": 400, "logit_bias": eog_bias(thinking_server)}
    with httpx.stream(
        "POST", thinking_server.v1 + "/chat/completions", json={**body, "stream": True}
    ) as r:
        events = chunks(r)  # keep a reference: a dropped generator closes the connection
        first = next(c for c in events if c["choices"][0]["delta"].get("reasoning_content"))
        answer = control(thinking_server, {"id": first["id"], "action": "reasoning_end"})
    assert answer.status_code == 200
    assert answer.json() == {
        "success": False,
        "message": "reasoning control not enabled for this completion",
    }


def test_control_on_model_without_reasoning(server):
    """A template without reasoning markers has no reasoning to end: the control succeeds and
    the answer goes on, as llama-server answers it."""
    body = {"messages": HI, "max_tokens": 400, "reasoning_control": True}
    body["logit_bias"] = eog_bias(server)
    with httpx.stream("POST", server.v1 + "/chat/completions", json={**body, "stream": True}) as r:
        events = chunks(r)
        first = next(c for c in events if c["choices"][0]["delta"].get("content"))
        answer = control(server, {"id": first["id"], "action": "reasoning_end"})
        rest = [c["choices"][0]["delta"].get("content") for c in events if c["choices"]]
    assert answer.json() == {"success": True}
    assert any(rest)  # the answer went on


def test_unknown_id(server):
    for path in ("/v1/chat/completions/control", "/chat/completions/control"):
        r = control(server, {"id": "chatcmpl-nope", "action": "reasoning_end"}, path)
        assert r.status_code == 200
        assert r.json() == {"success": False, "message": "no active completion for this id"}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"action": "reasoning_end"}, "missing completion id"),
        ({"id": "", "action": "reasoning_end"}, "missing completion id"),
        ({}, "missing completion id"),
        (None, "missing completion id"),
        ({"id": "chatcmpl-x"}, "unknown control action"),
        ({"id": "chatcmpl-x", "action": "cancel"}, "unknown control action"),
    ],
)
def test_control_errors(server, body, message):
    r = control(server, body)
    assert r.status_code == 400
    assert r.json() == {"error": {"code": 400, "message": message, "type": "invalid_request_error"}}


def test_control_wrong_type_names_field(server):
    r = control(server, {"id": 5, "action": "reasoning_end"})
    assert r.status_code == 400
    assert "Field 'id'" in r.json()["error"]["message"]


def test_control_in_openapi(server):
    doc = httpx.get(server.url + "/openapi.json").json()
    assert "/v1/chat/completions/control" in doc["paths"]
    assert "/chat/completions/control" not in doc["paths"]
