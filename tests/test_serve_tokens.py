"""llama-server's token routes on the real model: `/tokenize`, `/detokenize`, `/apply-template`
and `/v1/chat/completions/input_tokens`, with the shapes and defaults of llama-server b11434."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

TEXT = "What is the capital of France ?"
HI = [{"role": "user", "content": "Hi"}]


def post(server, path: str, body: object) -> httpx.Response:
    return httpx.post(server.url + path, json=body, timeout=60)


def test_tokenize_then_detokenize_gives_the_text_back(server) -> None:
    tokens = post(server, "/tokenize", {"content": TEXT}).json()["tokens"]
    assert len(tokens) > 5 and all(isinstance(t, int) for t in tokens)
    assert tokens == server.state.engine.model.tokenize(TEXT, add_special=False)
    back = post(server, "/detokenize", {"tokens": tokens})
    assert back.status_code == 200 and back.json() == {"content": TEXT}


def test_add_special_and_parse_special(server) -> None:
    model = server.state.engine.model
    plain = post(server, "/tokenize", {"content": TEXT}).json()["tokens"]
    special = post(server, "/tokenize", {"content": TEXT, "add_special": True}).json()["tokens"]
    assert special == model.tokenize(TEXT, add_special=True)
    marker = "<|im_start|>user"
    parsed = post(server, "/tokenize", {"content": marker}).json()["tokens"]
    literal = post(server, "/tokenize", {"content": marker, "parse_special": False}).json()
    assert len(parsed) < len(literal["tokens"])  # one special token vs its characters
    assert plain == model.tokenize(TEXT, add_special=False)


def test_pieces_are_text_or_the_bytes_of_half_a_character(server) -> None:
    content = "This is a test string with unicode 媽 and emoji 🤗"
    got = post(server, "/tokenize", {"content": content, "with_pieces": True}).json()["tokens"]
    assert all(t["id"] > 0 and t["piece"] for t in got)
    rebuilt = b"".join(
        t["piece"].encode() if isinstance(t["piece"], str) else bytes(t["piece"]) for t in got
    )
    assert rebuilt.decode() == content
    assert any(isinstance(t["piece"], list) for t in got)  # the emoji is split in bytes


def test_mixed_content_keeps_ids_and_tokenizes_texts(server) -> None:
    model = server.state.engine.model
    hello = model.tokenize("Hello", add_special=False)
    got = post(server, "/tokenize", {"content": ["Hello", 42, " world"]}).json()["tokens"]
    assert got == hello + [42] + model.tokenize(" world", add_special=False)


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/detokenize", {"tokens": [1, -5]}, "tokens.1"),
        ("/detokenize", {"tokens": [10**9]}, "tokens.0"),
        ("/tokenize", {"content": ["a", 10**9]}, "content.1"),
    ],
)
def test_ids_outside_the_vocabulary_are_a_400(server, path, body, field) -> None:
    r = post(server, path, body)
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and f"'{field}'" in error["message"]


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/tokenize", {"content": 5}),
        ("/tokenize", {"content": [1.5]}),
        ("/detokenize", {"tokens": "abc"}),
        ("/detokenize", {"tokens": [True]}),
        ("/tokenize", [1, 2]),
    ],
)
def test_wrong_types_are_a_400(server, path, body) -> None:
    r = post(server, path, body)
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"


def test_empty_bodies_answer_empty(server) -> None:
    assert post(server, "/tokenize", {}).json() == {"tokens": []}
    assert post(server, "/detokenize", {}).json() == {"content": ""}


def test_apply_template_renders_what_chat_would_see(server) -> None:
    r = post(server, "/apply-template", {"messages": HI})
    assert r.status_code == 200
    prompt = r.json()["prompt"]
    assert prompt.endswith("<|im_start|>assistant\n") and "<|im_start|>user\nHi" in prompt
    count = post(server, "/v1/chat/completions/input_tokens", {"messages": HI}).json()
    assert count == {"object": "response.input_tokens", "input_tokens": count["input_tokens"]}
    usage = httpx.post(
        server.v1 + "/chat/completions", json={"messages": HI, "max_tokens": 1}, timeout=60
    ).json()["usage"]
    assert count["input_tokens"] == usage["prompt_tokens"]


def test_apply_template_refuses_what_chat_refuses(server) -> None:
    r = post(server, "/apply-template", {"messages": []})
    assert r.status_code == 400
    assert post(server, "/apply-template", {"messages": "hi"}).status_code == 400


def test_concurrent_token_requests_agree(server) -> None:
    texts = [f"{TEXT} number {i}" for i in range(12)]
    alone = [post(server, "/tokenize", {"content": t}).json()["tokens"] for t in texts]
    with ThreadPoolExecutor(6) as pool:
        together = list(pool.map(lambda t: post(server, "/tokenize", {"content": t}), texts))
    assert [r.json()["tokens"] for r in together] == alone


@pytest.fixture(scope="module")
def command_r7b_server():
    """A server rendering Command R7B's template, which reads an undefined `enable_thinking`
    as off."""
    from serverkit import run_server
    from sharedkit import CHAT_TEMPLATES

    template = CHAT_TEMPLATES / "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja"
    if not template.exists():
        pytest.skip(f"no {template}")
    with run_server(parallel=1, chat_template_file=str(template)) as live:
        yield live


@pytest.mark.slow
def test_templates_think_unless_told_not_to_as_llama_server(command_r7b_server) -> None:
    """llama.cpp renders every template with `enable_thinking` true by default: a template that
    reads it as off when undefined still opens its thinking; false (or --reasoning off) closes."""
    prompt = post(command_r7b_server, "/apply-template", {"messages": HI}).json()["prompt"]
    assert prompt.endswith("<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>")
    off = {"messages": HI, "chat_template_kwargs": {"enable_thinking": False}}
    prompt = post(command_r7b_server, "/apply-template", off).json()["prompt"]
    assert prompt.endswith("<|CHATBOT_TOKEN|><|START_THINKING|><|END_THINKING|>")


def test_a_builtin_template_name_chooses_llama_cpps_format(server) -> None:
    """What `--chat-template llama3` gives the chat model: llama.cpp's format, tokenised."""
    from llamactl import ChatModel, ChatRequest

    chat = ChatModel(server.state.engine, "llama3")
    rendered = chat.render(ChatRequest(messages=HI))
    assert rendered.text.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")
    assert "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>" in rendered.text
    assert rendered.tokens == server.state.engine.model.tokenize(rendered.text, add_special=True)
