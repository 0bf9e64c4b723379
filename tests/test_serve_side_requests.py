"""An agent's conversation keeps its KV while the agent sends side requests between turns.

Coding agents send more than the conversation: a title for the session, a topic check, a
`count_tokens` before each turn, a second conversation. None of them may cost the next turn its
prompt: the turn after them reuses everything the turn before it decoded, on one slot (the
conversation comes back from the RAM prompt cache) and on the default four. The same holds
for a `previous_response_id` chain, whose chained turn decodes only its new input. Run on the
dense embedded model and on Gemma 3's sliding-window attention (docs/clients.md)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from model_matrix import gemma_path
from serverkit import LiveServer, run_server

from llamactl.engine.prompt_chunks import MAX_REDO

MODEL_FIXTURES = {"live"}

SYSTEM = "You are a careful assistant working in a small repository. " + " ".join(
    f"Rule {i}: keep answers short and say which file you read." for i in range(40)
)
TITLE_SYSTEM = "Write a five-word title for the conversation below. Answer with the title only."
GREEDY = {"temperature": 0}


@pytest.fixture(
    scope="module",
    params=[
        pytest.param({"parallel": 1}, id="smollm2-one-slot"),
        pytest.param({"parallel": 4}, id="smollm2-four-slots"),
        pytest.param({"parallel": 1, "model": "gemma"}, id="gemma3-one-slot"),
    ],
)
def live(request: pytest.FixtureRequest) -> Iterator[LiveServer]:
    overrides = dict(request.param)
    if overrides.get("model") == "gemma":
        overrides["model"] = str(gemma_path())
    with run_server(**overrides) as server:
        yield server


def post(live: LiveServer, path: str, body: dict[str, Any]) -> dict[str, Any]:
    resp = httpx.post(live.url + path, json=body, timeout=600)
    assert resp.status_code == 200, resp.text
    return resp.json()


def message(live: LiveServer, system: str, turns: list[dict[str, Any]], n: int) -> dict[str, Any]:
    body = {"model": "m", "system": system, "messages": turns, "max_tokens": n, **GREEDY}
    return post(live, "/v1/messages", body)


def prompt_of(usage: dict[str, Any]) -> int:
    return usage["input_tokens"] + usage["cache_read_input_tokens"]


def side_requests(live: LiveServer, first_question: str) -> None:
    """What an agent sends between two turns: a title, a token count, another conversation."""
    message(live, TITLE_SYSTEM, [{"role": "user", "content": first_question}], 8)
    post(
        live,
        "/v1/messages/count_tokens",
        {"model": "m", "system": SYSTEM, "messages": [{"role": "user", "content": "x"}]},
    )
    post(
        live,
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "Name a colour."}], "max_tokens": 4, **GREEDY},
    )


def test_side_requests_between_turns_cost_the_conversation_nothing(live):
    question = "Which file holds the settings?"
    turns: list[dict[str, Any]] = [{"role": "user", "content": question}]
    first = message(live, SYSTEM, turns, 12)
    answer = "".join(b["text"] for b in first["content"] if b["type"] == "text")
    side_requests(live, question)
    turns += [
        {"role": "assistant", "content": answer},
        {"role": "user", "content": "And which one holds the tests?"},
    ]
    second = message(live, SYSTEM, turns, 4)
    before = prompt_of(first["usage"])
    # the whole first prompt came back, less the rows an exact resume decodes again (on one
    # slot, rows made otherwise than a cold run would make them: prompt_chunks.py)
    cached = second["usage"]["cache_read_input_tokens"]
    assert cached >= before - MAX_REDO, (first["usage"], second["usage"])


def test_a_response_chain_decodes_only_each_new_input(live):
    first = post(
        live,
        "/v1/responses",
        {"instructions": SYSTEM, "input": "My name is Ada.", "max_output_tokens": 8, **GREEDY},
    )
    previous, prompt = first["id"], first["usage"]["input_tokens"]
    for question in ("What is my name?", "Spell it backwards."):
        side_requests(live, "My name is Ada.")
        nxt = post(
            live,
            "/v1/responses",
            {
                "instructions": SYSTEM,  # not carried over by the chain (OpenAI's rule)
                "input": question,
                "previous_response_id": previous,
                "max_output_tokens": 8,
                **GREEDY,
            },
        )
        usage = nxt["usage"]
        cached = usage["input_tokens_details"]["cached_tokens"]
        assert cached >= prompt - MAX_REDO, (prompt, usage)
        previous, prompt = nxt["id"], usage["input_tokens"]
