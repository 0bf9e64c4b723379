"""llama-server's native `/completion` (and `/completions`) on the real model: its request
fields (`n_predict`, `n_probs`, `return_tokens`, `json_schema`, `n_cmpl`, prompt forms) and its
result objects, streamed and not."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

PROMPT = "The capital of France is"
GREEDY = {"temperature": 0}


def native(server, body: dict, path: str = "/completion") -> httpx.Response:
    return httpx.post(server.url + path, json={**GREEDY, **body}, timeout=120)


def stream_events(server, body: dict) -> tuple[list[dict], list[str]]:
    events, raw = [], []
    with httpx.stream(
        "POST", server.url + "/completion", json={**GREEDY, **body, "stream": True}, timeout=120
    ) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: "):
                raw.append(line[6:])
                events.append(json.loads(line[6:]))
    return events, raw


def test_a_native_result(server) -> None:
    r = native(server, {"prompt": PROMPT, "n_predict": 6})
    assert r.status_code == 200, r.text
    got = r.json()
    assert isinstance(got["content"], str) and got["stop"] is True
    assert got["tokens"] == [] and got["stop_type"] == "limit"
    assert got["tokens_predicted"] == 6 == got["timings"]["predicted_n"]
    prompt_tokens = server.state.engine.model.tokenize(PROMPT, add_special=True)
    assert got["tokens_evaluated"] == len(prompt_tokens)
    assert got["timings"]["prompt_n"] + got["timings"]["cache_n"] == len(prompt_tokens)
    assert got["generation_settings"]["n_predict"] == 6
    assert got["generation_settings"]["temperature"] == 0
    assert got["prompt"].endswith(PROMPT) and got["truncated"] is False
    assert isinstance(got["has_new_line"], bool)


def test_return_tokens_and_stop_words(server) -> None:
    got = native(server, {"prompt": PROMPT, "n_predict": 6, "return_tokens": True}).json()
    model = server.state.engine.model
    assert len(got["tokens"]) == 6 and model.detokenize(got["tokens"]) == got["content"]
    word = got["content"].split()[0]
    stopped = native(server, {"prompt": PROMPT, "n_predict": 6, "stop": [word]}).json()
    assert stopped["stop_type"] == "word" and stopped["stopping_word"] == word
    assert word not in stopped["content"]


def test_returned_tokens_end_with_the_end_of_generation_token(server) -> None:
    """`tokens` holds every generated token, the EOS that ended the answer too (llama-server
    counts it in tokens_predicted and returns it)."""
    chat = "<|im_start|>user\nSay hi.<|im_end|>\n<|im_start|>assistant\n"
    got = native(server, {"prompt": chat, "n_predict": 200, "return_tokens": True}).json()
    assert got["stop_type"] == "eos"
    assert len(got["tokens"]) == got["tokens_predicted"]
    assert server.state.engine.model.is_eog(got["tokens"][-1])


def test_the_stream_adds_up_to_the_answer(server) -> None:
    whole = native(server, {"prompt": PROMPT, "n_predict": 12}).json()
    events, raw = stream_events(server, {"prompt": PROMPT, "n_predict": 12})
    assert "[DONE]" not in raw  # the native stream just ends
    *partial, final = events
    assert all(e["stop"] is False for e in partial) and final["stop"] is True
    assert "".join(e["content"] for e in partial) == whole["content"]
    assert final["timings"]["predicted_n"] == 12 and final["stop_type"] == "limit"


def test_prompt_forms(server) -> None:
    model = server.state.engine.model
    ids = model.tokenize(PROMPT, add_special=True)
    by_text = native(server, {"prompt": PROMPT, "n_predict": 4}).json()
    by_ids = native(server, {"prompt": ids, "n_predict": 4}).json()
    assert by_ids["content"] == by_text["content"]
    mixed = native(server, {"prompt": [*ids[:-1], model.detokenize(ids[-1:])], "n_predict": 4})
    assert mixed.status_code == 200 and isinstance(mixed.json()["content"], str)
    listed = native(server, {"prompt": [PROMPT, ids], "n_predict": 4}).json()
    assert isinstance(listed, list) and len(listed) == 2
    assert listed[0]["content"] == listed[1]["content"] == by_text["content"]
    assert [x["index"] for x in listed] == [0, 1]


def test_n_cmpl_gives_several_results(server) -> None:
    got = native(server, {"prompt": PROMPT, "n_predict": 4, "n_cmpl": 2}).json()
    assert isinstance(got, list) and [x["index"] for x in got] == [0, 1]
    assert got[0]["content"] == got[1]["content"]  # greedy


def test_n_probs(server) -> None:
    got = native(server, {"prompt": PROMPT, "n_predict": 5, "n_probs": 3}).json()
    probs = got["completion_probabilities"]
    assert len(probs) == 5
    for tok in probs:
        assert set(tok) >= {"id", "token", "logprob", "bytes", "top_logprobs"}
        assert len(tok["top_logprobs"]) == 3 and tok["logprob"] <= 0
    events, _ = stream_events(server, {"prompt": PROMPT, "n_predict": 5, "n_probs": 2})
    streamed = [p for e in events if not e["stop"] for p in e.get("completion_probabilities", [])]
    assert len(streamed) == 5


def test_json_schema_constrains_the_output(server) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    got = native(server, {"prompt": "JSON:", "n_predict": 40, "json_schema": schema}).json()
    assert isinstance(json.loads(got["content"])["a"], int)


def test_completions_without_v1_is_native(server) -> None:
    got = native(server, {"prompt": PROMPT, "n_predict": 3}, path="/completions").json()
    assert "content" in got and "choices" not in got
    oai = httpx.post(
        server.v1 + "/completions", json={"prompt": PROMPT, "max_tokens": 3, **GREEDY}, timeout=60
    ).json()
    assert oai["choices"][0]["text"] == got["content"]


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"prompt": PROMPT, "n_probs": 50}, "'n_probs'"),
        ({"prompt": []}, "'prompt'"),
        ({"prompt": [1, 10**9]}, "'prompt.1'"),
        ({"prompt": [PROMPT, [10**9]]}, "'prompt.1.0'"),
        ({"prompt": PROMPT, "n_predict": 0}, "'n_predict'"),
        ({"prompt": {"x": 1}}, "'prompt"),
        (
            {"prompt": PROMPT, "json_schema": {"type": "object"}, "grammar": 'root ::= "a"'},
            "'json_schema'",
        ),
    ],
)
def test_bad_requests_name_the_field(server, body, needle) -> None:
    r = native(server, body)
    assert r.status_code == 400, r.text
    assert needle in r.json()["error"]["message"]


def test_concurrent_completions_equal_their_solo_runs(server) -> None:
    prompts = [f"{PROMPT} {w}" for w in ("not", "and", "the", "a")]
    alone = [native(server, {"prompt": p, "n_predict": 16}).json()["content"] for p in prompts]
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda p: native(server, {"prompt": p, "n_predict": 16}), prompts))
    assert [r.json()["content"] for r in together] == alone


WORDS = ["the", "The", "a", "is", "and", "of", "to", "in", "book", "Book", "I", "it"]


@pytest.mark.parametrize("form", ["ids-list", "ids-object", "texts-list", "texts-object", "ban"])
def test_logit_bias_in_llama_servers_forms(server, form) -> None:
    """Token ids or texts (a text biases each of its tokens), as a list of pairs or an object,
    and `false` for a ban: the biased words never appear."""
    model = server.state.engine.model
    texts = [f" {w} " for w in WORDS]
    ids = sorted({t for text in texts for t in model.tokenize(text, add_special=False)})
    bias: object = {
        "ids-list": [[t, -100] for t in ids],
        "ids-object": {str(t): -100 for t in ids},
        "texts-list": [[text, -100] for text in texts],
        "texts-object": dict.fromkeys(texts, -100),
        "ban": [[t, False] for t in ids],
    }[form]
    body = {"prompt": "What is the best book", "n_predict": 32, "logit_bias": bias}
    r = native(server, body)
    assert r.status_code == 200, r.text
    content = r.json()["content"]
    plain = native(server, {"prompt": "What is the best book", "n_predict": 32}).json()["content"]
    assert content != plain
    assert all(text not in content for text in texts)


@pytest.mark.parametrize(
    ("bias", "needle"),
    [({"5": 300}, "'logit_bias.5'"), ([[10**9, 1]], "vocabulary"), ([["x", True]], "bans")],
)
def test_bad_logit_bias_is_a_400(server, bias, needle) -> None:
    r = native(server, {"prompt": PROMPT, "n_predict": 1, "logit_bias": bias})
    assert r.status_code == 400 and needle in r.json()["error"]["message"]


def test_ignore_eos_shows_its_bans_in_the_generation_settings(server) -> None:
    """As llama-server: `ignore_eos` lists every end-of-generation token with bias null (-inf)
    in `generation_settings.logit_bias`; without it only the request's own biases."""
    body = {"prompt": PROMPT, "n_predict": 4, "temperature": 0}
    banned = native(server, {**body, "ignore_eos": True}).json()["generation_settings"]
    model = server.state.engine.model
    assert {e["token"] for e in banned["logit_bias"]} == set(model.eog_tokens)
    assert all(e["bias"] is None for e in banned["logit_bias"])
    plain = native(server, {**body, "logit_bias": [[42, 1.5]]}).json()["generation_settings"]
    assert plain["logit_bias"] == [{"token": 42, "bias": 1.5}]
