"""`/infill` on a real FIM-declaring GGUF (SmolLM2 with FIM token ids in its metadata): the exact
prompt llama-server's format_infill builds, greedy generation through the native completion
service (streamed and not), trimming, bad input, concurrency, and the 501 without FIM tokens."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from fixture_ggufs import FIM_MARKERS
from serverkit import LiveServer, run_server

from llamactl import FimTokens, Model, infill_tokens

MODEL_FIXTURES = {"fim"}

PREFIX = 'def add(a, b):\n    """Add two numbers."""\n'
PROMPT = "    return"
SUFFIX = "\n\nprint(add(1, 2))\n"
EXTRA = [{"filename": "util.py", "text": "def sub(a, b):\n    return a - b\n"}]
BASE = {"input_prefix": PREFIX, "prompt": PROMPT, "input_suffix": SUFFIX, "temperature": 0}


@pytest.fixture(scope="module")
def fim(fim_gguf) -> Iterator[LiveServer]:
    with run_server(model=str(fim_gguf), parallel=4) as live:
        yield live


def marker(model: Model, kind: str) -> int:
    [token] = model.tokenize(FIM_MARKERS[kind], add_special=False, parse_special=True)
    return token


def plain(model: Model, text: str) -> list[int]:
    return model.tokenize(text, add_special=False, parse_special=False)


def expected_prompt(model: Model, extra: list[dict]) -> list[int]:
    """The repo-level FIM pattern of llama-server's README, written out token by token."""
    out = [marker(model, "rep"), *plain(model, "myproject\n")]
    for chunk in extra:
        out += [marker(model, "sep"), *plain(model, chunk["filename"] + "\n")]
        out += plain(model, chunk["text"])
    out += [marker(model, "sep"), *plain(model, "filename\n")]
    out += [marker(model, "pre"), *plain(model, PREFIX)]
    out += model.tokenize(PROMPT, add_special=False, parse_special=True)
    out += [marker(model, "suf"), *plain(model, SUFFIX), marker(model, "mid")]
    return out


def infill(live: LiveServer, body: dict) -> httpx.Response:
    return httpx.post(live.url + "/infill", json=body, timeout=120)


@pytest.mark.parametrize("extra", [[], EXTRA])
def test_the_prompt_is_llama_servers(fim, extra) -> None:
    model = fim.state.engine.model
    want = expected_prompt(model, extra)
    got = infill(fim, {**BASE, "input_extra": extra, "n_predict": 1}).json()
    assert got["tokens_evaluated"] == len(want)
    assert got["prompt"] == model.detokenize(want, special=True)
    settings = fim.state.settings
    built = infill_tokens(
        model,
        plain(model, PREFIX),
        plain(model, SUFFIX),
        [(c["filename"], c["text"]) for c in extra],
        model.tokenize(PROMPT, add_special=False, parse_special=True),
        n_batch=settings.batch_size,
        n_predict=-1,
        n_ctx=fim.state.engine.n_ctx_slot,
    )
    assert built == want


# llama-server b11434's answers on this GGUF (-c 16384 -np 4, greedy, n_predict 16), by hand:
# (input_prefix, prompt, input_suffix, input_extra) -> (content, tokens_evaluated, stop_type)
LLAMA_SERVER_ANSWERS = [
    (("for i in range(10):\n", "    print(", "", []), ("_name(i))\n", 22, "eos")),
    (
        ("class Point:\n    def __init__(self, x, y):\n", "        self.x", "\n", []),
        ("assistant\nThe code is already quite clear, but I can provide a more", 30, "limit"),
    ),
    (
        ("# Compute the factorial of n\ndef factorial(n):\n", "    if n", "\n", EXTRA),
        ("assistant\ndef sub(a, b):\n    return a - b\n", 47, "limit"),
    ),
]


@pytest.mark.parametrize(("ask", "answer"), LLAMA_SERVER_ANSWERS)
def test_greedy_infill_answers_as_llama_server(fim, ask, answer) -> None:
    prefix, prompt, suffix, extra = ask
    body = {"input_prefix": prefix, "prompt": prompt, "input_suffix": suffix}
    body |= {"input_extra": extra, "n_predict": 16, "temperature": 0}
    got = infill(fim, body).json()
    assert (got["content"], got["tokens_evaluated"], got["stop_type"]) == answer


def test_greedy_infill_is_the_completion_of_its_prompt(fim) -> None:
    model = fim.state.engine.model
    options = {"n_predict": 8, "temperature": 0, "return_tokens": True}
    got = infill(fim, {**BASE, "input_extra": EXTRA, **options}).json()
    prompt = expected_prompt(model, EXTRA)
    same = httpx.post(fim.url + "/completion", json={"prompt": prompt, **options}, timeout=120)
    assert got["content"] == same.json()["content"] and got["tokens"] == same.json()["tokens"]
    assert got["tokens"] and got["stop_type"] in ("eos", "limit")


def test_streamed_equals_whole(fim) -> None:
    body = {**BASE, "input_extra": EXTRA, "n_predict": 8, "ignore_eos": True}
    whole = infill(fim, body).json()
    with httpx.stream("POST", fim.url + "/infill", json={**body, "stream": True}) as r:
        frames = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    assert "".join(f["content"] for f in frames) == whole["content"]
    assert frames[-1]["stop"] is True and frames[-1]["stop_type"] == "limit"


def test_concurrent_infills_equal_alone(fim) -> None:
    bodies = [
        {**BASE, "input_prefix": f"def f{i}(x):\n", "n_predict": 10, "ignore_eos": True}
        for i in range(6)
    ]
    alone = [infill(fim, b).json()["content"] for b in bodies]
    with ThreadPoolExecutor(len(bodies)) as pool:
        together = list(pool.map(lambda b: infill(fim, b).json()["content"], bodies))
    assert together == alone


@pytest.mark.parametrize(
    "change",
    [
        {"input_extra": [{}]},
        {"input_extra": [{"filename": "ok"}]},
        {"input_extra": [{"filename": 123}]},
        {"input_extra": [{"filename": 123, "text": "abc"}]},
        {"input_extra": [{"filename": 123, "text": 456}]},
        {"input_extra": {"filename": "a", "text": "b"}},
        {"input_prefix": None},
        {"input_suffix": None},
        {"prompt": 5},
        {"input_prefix": [10**9]},  # a token id outside the vocabulary
    ],
)
def test_bad_input_is_a_400(fim, change) -> None:
    body = {k: v for k, v in {**BASE, **change}.items() if v is not None}
    r = infill(fim, body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["type"] == "invalid_request_error"


def test_without_fim_tokens_llama_servers_501(server) -> None:
    r = infill(server, BASE)
    assert r.status_code == 501
    assert r.json()["error"] == {
        "code": 501,
        "message": "Infill is not supported by this model: prefix token is missing. "
        "suffix token is missing. middle token is missing. ",
        "type": "not_supported_error",
    }


def test_trimming_keeps_the_prefix_end_the_suffix_start_and_the_extra_end(fim) -> None:
    model = fim.state.engine.model
    prefix = plain(model, "x = 1\n" * 40)
    suffix = plain(model, "y = 2\n" * 40)
    prompt = plain(model, "z")
    built = infill_tokens(
        model, prefix, suffix, [("a.py", "w = 3\n" * 40)], prompt,
        n_batch=32, n_predict=8, n_ctx=64,
    )  # fmt: skip
    pre, suf, mid = (marker(model, k) for k in ("pre", "suf", "mid"))
    i_pre, i_suf = built.index(pre), built.index(suf)
    assert built[i_pre + 1 : i_suf] == prefix[-24:] + prompt  # 3/4 of the batch
    assert built[i_suf + 1 : -1] == suffix[: 32 // 4 - 2 - len(prompt)]
    assert built[-1] == mid and i_pre == 64 - 32 - 2 * 8  # the extra context's last 16


@pytest.mark.slow
def test_without_file_separators_chunks_are_snippets(fim_basic_gguf) -> None:
    model = Model(fim_basic_gguf, vocab_only=True)
    try:
        built = infill_tokens(
            model, plain(model, PREFIX), plain(model, SUFFIX), [("u.py", "k = 0\n")], [],
            n_batch=512, n_predict=-1, n_ctx=4096,
        )  # fmt: skip
        fim = FimTokens.of(model)
        assert fim.sep is None
        # llama.cpp finds SmolLM2's `<reponame>` a FIM_REP by itself: the repo line stays
        repo = [fim.rep, *plain(model, "myproject\n")] if fim.rep is not None else []
        snippet = plain(model, "\n\n--- snippet ---\n\n") + plain(model, "k = 0\n")
        assert built[: len(repo) + len(snippet)] == repo + snippet
        assert built[len(repo) + len(snippet)] == marker(model, "pre")
    finally:
        model.close()
