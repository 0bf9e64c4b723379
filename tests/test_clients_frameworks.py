"""The Python frameworks people point at a local server, run unchanged against llamactl on the
embedded SmolLM2: LangChain (`langchain-openai`), LlamaIndex (`OpenAILike`), litellm (its
OpenAI and Anthropic routes) and simonw's `llm`. Per client: a turn, a streamed turn (equal to
the whole one: greedy), a tool call and its result, and a second turn that reuses the first's
prompt from the cache (docs/clients.md)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from clientkit import reused
from serverkit import LiveServer, run_server

# litellm fetches its model price list from GitHub at import unless told to use its own copy
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

MODEL_FIXTURES = {"server"}
ANSWER = 48  # tokens per answer: enough to see the model speak, short enough to be quick

WEATHER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "description": "The city"}},
    "required": ["city"],
}
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city",
        "parameters": WEATHER_SCHEMA,
    },
}


def get_weather(city: str) -> str:
    """The current weather in a city."""
    return f"Sunny and 24 C in {city}."


@pytest.fixture(scope="module")
def server() -> Iterator[LiveServer]:
    with run_server(parallel=2, embedding=True, pooling="mean") as live:
        yield live


def assert_second_turn_hits_the_cache(live: LiveServer, first: Callable, second: Callable) -> None:
    first()
    _, cached, decoded = reused(live, second)
    assert cached > 20 and cached > decoded, (cached, decoded)


# ------------------------------------------------------------------------------- LangChain


def test_langchain_chat_stream_tools_and_cache(server: LiveServer) -> None:
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(
        base_url=server.v1, api_key="none", model="smollm2", temperature=0, max_tokens=ANSWER
    )
    question = [HumanMessage("Name a colour of the sky.")]
    whole = llm.invoke(question)
    assert isinstance(whole.content, str) and whole.content
    assert "".join(str(chunk.content) for chunk in llm.stream(question)) == whole.content

    tooled = llm.bind_tools([get_weather], tool_choice="get_weather")
    ask = [HumanMessage("What is the weather in Lisbon?")]
    called = tooled.invoke(ask)
    (call,) = called.tool_calls
    assert call["name"] == "get_weather" and isinstance(call["args"].get("city"), str)
    result = ToolMessage(get_weather(**call["args"]), tool_call_id=call["id"])
    final = llm.bind_tools([get_weather]).invoke([*ask, called, result])
    assert final.content or final.tool_calls

    follow = [*question, whole, HumanMessage("And at night?")]
    assert_second_turn_hits_the_cache(
        server, lambda: llm.invoke(question), lambda: llm.invoke(follow)
    )


def test_langchain_structured_output_and_embeddings(server: LiveServer) -> None:
    from langchain_openai import ChatOpenAI, OpenAIEmbeddings
    from pydantic import BaseModel

    class City(BaseModel):
        name: str
        country: str

    llm = ChatOpenAI(base_url=server.v1, api_key="none", model="x", temperature=0, max_tokens=64)
    city = llm.with_structured_output(City, method="json_schema").invoke("Name a city in Japan.")
    assert isinstance(city, City) and city.name
    # tiktoken's tables are downloaded from the internet: the offline client counts no tokens
    embed = OpenAIEmbeddings(
        base_url=server.v1, api_key="none", model="x", check_embedding_ctx_length=False
    )
    one, two = embed.embed_documents(["a red apple", "a green pear"])
    assert len(one) == len(two) == server.state.engine.model.info.n_embd
    assert embed.embed_query("a red apple") == pytest.approx(one, abs=1e-5)


# ------------------------------------------------------------------------------ LlamaIndex


def test_llama_index_openai_like(server: LiveServer) -> None:
    from llama_index.core.base.llms.types import ChatMessage
    from llama_index.core.tools import FunctionTool
    from llama_index.llms.openai_like import OpenAILike

    llm = OpenAILike(
        model="smollm2",
        api_base=server.v1,
        api_key="none",
        is_chat_model=True,
        is_function_calling_model=True,
        temperature=0,
        max_tokens=ANSWER,
        context_window=8192,
    )
    whole = llm.complete("Name a colour of the sky.")
    assert whole.text
    streamed = "".join(
        part.delta or "" for part in llm.stream_complete("Name a colour of the sky.")
    )
    assert streamed == whole.text

    tool = FunctionTool.from_defaults(fn=get_weather)
    reply = llm.chat_with_tools([tool], user_msg="What is the weather in Lima?", tool_required=True)
    (call,) = llm.get_tool_calls_from_response(reply, error_on_no_tool_call=True)
    assert call.tool_name == "get_weather" and isinstance(call.tool_kwargs.get("city"), str)

    first = [ChatMessage(role="user", content="Name a colour of the sky.")]
    answer = llm.chat(first).message
    follow = [*first, answer, ChatMessage(role="user", content="And at night?")]
    assert_second_turn_hits_the_cache(server, lambda: llm.chat(first), lambda: llm.chat(follow))


# --------------------------------------------------------------------------------- litellm


@pytest.mark.parametrize(
    ("model", "route"),
    [("openai/smollm2", "v1"), ("anthropic/claude-sonnet-4-5", "url")],
    ids=["openai-route", "anthropic-route"],
)
def test_litellm(server: LiveServer, model: str, route: str) -> None:
    """litellm's OpenAI route (chat completions) and Anthropic route (/v1/messages)."""
    import litellm

    def complete(messages: list[dict[str, Any]], **kw: Any) -> Any:
        return litellm.completion(
            model=model,
            api_base=getattr(server, route),
            api_key="none",
            messages=messages,
            temperature=0,
            max_tokens=ANSWER,
            **kw,
        )

    question = [
        {"role": "system", "content": "You answer in one sentence."},
        {"role": "user", "content": "Name a colour of the sky."},
    ]
    whole = complete(question).choices[0].message.content
    assert whole
    streamed = "".join(
        chunk.choices[0].delta.content or "" for chunk in complete(question, stream=True)
    )
    assert streamed == whole

    ask = [{"role": "user", "content": "What is the weather in Oslo?"}]
    called = complete(ask, tools=[WEATHER_TOOL], tool_choice="required").choices[0]
    assert called.finish_reason == "tool_calls"
    (call,) = called.message.tool_calls
    assert call.function.name == "get_weather"
    arguments = json.loads(call.function.arguments)
    result = {"role": "tool", "tool_call_id": call.id, "content": get_weather(**arguments)}
    history = [*ask, called.message.model_dump(exclude_none=True), result]
    assert complete(history, tools=[WEATHER_TOOL]).choices[0].finish_reason

    follow = [
        *question,
        {"role": "assistant", "content": whole},
        {"role": "user", "content": "Why?"},
    ]
    assert_second_turn_hits_the_cache(server, lambda: complete(question), lambda: complete(follow))


# ------------------------------------------------------------------------------ simonw/llm


@pytest.fixture
def llm_model(server: LiveServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """`llm`'s documented way to reach an OpenAI-compatible server: extra-openai-models.yaml."""
    import llm

    monkeypatch.setenv("LLM_USER_PATH", str(tmp_path))
    (tmp_path / "extra-openai-models.yaml").write_text(
        "- model_id: llamactl\n"
        "  model_name: smollm2\n"
        f"  api_base: {server.v1}\n"
        "  supports_tools: true\n"
        "  supports_schema: true\n"
    )
    return llm.get_model("llamactl")


def test_simonw_llm(server: LiveServer, llm_model: Any) -> None:
    options = {"temperature": 0, "max_tokens": ANSWER}
    whole = llm_model.prompt("Name a colour of the sky.", key="none", **options).text()
    assert whole
    response = llm_model.prompt("Name a colour of the sky.", key="none", stream=True, **options)
    assert "".join(response) == whole

    conversation = llm_model.conversation()
    conversation.prompt("Name a colour of the sky.", key="none", **options).text()
    _, cached, decoded = reused(
        server, lambda: conversation.prompt("And at night?", key="none", **options).text()
    )
    assert cached > 20 and cached > decoded

    calls: list[str] = []

    def weather(city: str) -> str:
        """The current weather in a city."""
        calls.append(city)
        return get_weather(city)

    chat = llm_model.conversation(tools=[weather])
    asked = chat.prompt("Use the weather tool: what is the weather in Rome?", key="none", **options)
    (call,) = asked.tool_calls()
    assert call.name == "weather" and isinstance(call.arguments.get("city"), str)
    results = asked.execute_tool_calls()
    assert calls == [call.arguments["city"]]  # llm ran the tool the model asked for
    answer = chat.prompt(tool_results=results, key="none", **options)
    assert answer.text() is not None and answer.prompt.tool_results == results
