"""Bodies of `POST /v1/chat/completions` and its control endpoint.

OpenAI's field names and shapes, plus llama-server's extensions (top_k, min_p, grammar, ...).
These models are the OpenAPI contract: every field says what it does and where it comes from.
Ranges are checked in `serving.py` (not here) so messages follow llama-server's wording.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt

from llamactl import ReasoningFormat

# ---------------------------------------------------------------------------- request parts


class ContentPart(BaseModel):
    """One part of a message's content; text parts are joined with a blank line."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(
        description="'text'; 'image_url' ({url}) or 'input_audio' ({data, format}) for a model "
        "served with its --mmproj"
    )
    text: str | None = Field(None, description="The text of a 'text' part")


class ChatMessage(BaseModel):
    """A conversation turn; extra keys are handed to the chat template untouched."""

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool", "function"] = Field(
        description="Who speaks: OpenAI's roles (any other is refused, as OpenAI does)"
    )
    content: str | list[ContentPart] | None = Field(
        None, description="Text, or a list of content parts"
    )
    name: str | None = Field(None, description="Optional participant name")
    reasoning_content: str | None = Field(
        None, description="An assistant turn's reasoning (rendered where the template shows it)"
    )
    tool_calls: list[dict[str, Any]] | None = Field(
        None, description="An assistant turn's tool calls, in OpenAI's shape"
    )
    tool_call_id: str | None = Field(None, description="For a tool turn: the call it answers")


class FunctionDefinition(BaseModel):
    name: str = Field(description="The function's name")
    description: str | None = Field(None, description="What the function does")
    parameters: dict[str, Any] | None = Field(None, description="JSON Schema of its arguments")
    strict: bool | None = Field(None, description="Accepted; arguments are not enforced yet")


class ChatTool(BaseModel):
    type: Literal["function"] = "function"
    function: FunctionDefinition


class NamedFunction(BaseModel):
    name: str


class NamedToolChoice(BaseModel):
    type: Literal["function"] = "function"
    function: NamedFunction


class StreamOptions(BaseModel):
    include_usage: bool = Field(
        False, description="Send a last chunk with `choices: []` and the request's usage"
    )


class JsonSchemaSpec(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    name: str | None = Field(None, description="A name for the schema (informational)")
    description: str | None = None
    schema_: dict[str, Any] | None = Field(
        None, alias="schema", description="The JSON Schema the output must satisfy"
    )
    strict: bool | None = Field(None, description="Accepted; the schema is always enforced")


class ResponseFormat(BaseModel):
    """Structured output, enforced by a grammar while sampling (not a prompt hint)."""

    model_config = ConfigDict(populate_by_name=True)

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaSpec | None = Field(None, description="For type 'json_schema'")
    schema_: dict[str, Any] | None = Field(
        None, alias="schema", description="llama-server extension: a schema for 'json_object'"
    )


ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh"]
ContinueFinal = bool | Literal["content", "reasoning_content"]


# OpenAI's {"token id": bias}, and llama-server's text keys, [[key, bias], ...] and `false`
LogitBias = dict[str, float | bool] | list[tuple[StrictInt | str, float | bool]]


class SamplingFields(BaseModel):
    """Sampling fields shared by chat and text completions."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = Field(
        None, description="This server's model (file name, stem or --alias); others are refused"
    )
    stream: bool = Field(False, description="Answer with server-sent events")
    stream_options: StreamOptions | None = None
    n: int | None = Field(None, description="Choices to generate, 1..--parallel (default 1)")
    n_cmpl: int | None = Field(None, description="llama-server's name for `n`")
    max_tokens: int | None = Field(
        None, description="Tokens to generate at most; -1 or absent: until the end (or context)"
    )
    temperature: float | None = Field(None, description="0..2; 0 is greedy")
    top_p: float | None = Field(None, description="Nucleus sampling, 0..1")
    top_k: int | None = Field(None, description="llama-server extension; 0 disables")
    min_p: float | None = Field(None, description="llama-server extension, 0..1")
    repeat_penalty: float | None = Field(None, description="llama-server extension; 1 is off")
    presence_penalty: float | None = Field(None, description="-2..2")
    frequency_penalty: float | None = Field(None, description="-2..2")
    logit_bias: LogitBias | None = Field(
        None,
        description="Token id (as a string) to a bias in -100..100; or llama-server's forms: a"
        " text key (every token of the text), a list of [token id or text, bias], and `false`"
        " for a bias that bans the token",
    )
    seed: int | None = Field(
        None, description="Sampling seed; -1 is random. Choice k of n uses seed + k"
    )
    stop: str | list[str] | None = Field(
        None, description="Stop strings (any number, as llama-server); not part of the output"
    )
    response_format: ResponseFormat | None = None
    grammar: str | None = Field(
        None, description="llama-server extension: a GBNF grammar the output must follow"
    )
    sse_ping_interval: int | None = Field(
        None,
        description="Seconds of silence before an SSE ping (`:`) in a stream; <= 0 disables; "
        "null: the server's --sse-ping-interval",
    )
    cache_prompt: bool = Field(True, description="Reuse a slot's cached prompt prefix")
    return_progress: bool = Field(
        False,
        description="In a stream, report prompt processing as `prompt_progress` {total, cache, "
        "processed, time_ms}: once when it starts and after each prompt batch (llama-server)",
    )
    lora: list[dict[str, Any]] | None = Field(
        None,
        description="llama-server's per-request LoRA scales, [{id, scale}] (left out: 0):"
        " accepted when they equal the server's global scales (POST /lora-adapters), else 400",
    )
    ignore_eos: bool = Field(
        False, description="Keep generating past end-of-generation tokens (benchmarks)"
    )
    user: str | None = Field(None, description="Accepted and ignored")


# ---------------------------------------------------------------------------- request


class ChatCompletionRequest(SamplingFields):
    """`POST /v1/chat/completions`. Unknown fields are ignored, as llama-server does."""

    messages: list[ChatMessage] = Field(description="The conversation so far")
    max_completion_tokens: int | None = Field(
        None, description="OpenAI's newer name for max_tokens; wins when both are sent"
    )
    logprobs: bool = Field(False, description="Return each output token's log-probability")
    top_logprobs: int | None = Field(
        None, description="0..20 most likely tokens per position (needs logprobs: true)"
    )
    tools: list[ChatTool] | None = Field(None, description="Functions the model may call")
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = Field(
        None,
        description="'auto' lets the model choose; 'required' and a named function force a "
        "call with a grammar (arguments valid for the tool's schema); 'none' hides the tools",
    )
    parallel_tool_calls: bool | None = Field(
        None, description="With tool_choice 'required', allow several calls in one turn [true]"
    )
    reasoning_effort: ReasoningEffort | None = Field(
        None, description="'none' or 'minimal' turn thinking off; any other value turns it on"
    )
    chat_template_kwargs: dict[str, Any] | None = Field(
        None, description="Extra variables for the chat template, e.g. {'enable_thinking': false}"
    )
    thinking_budget_tokens: int | None = Field(
        None, description="Reasoning tokens allowed before the end of thinking is forced; -1 off"
    )
    reasoning_budget: int | None = Field(None, description="Alias of thinking_budget_tokens")
    reasoning_format: ReasoningFormat | None = Field(
        None,
        description="Where reasoning goes: auto/deepseek (reasoning_content), none (left in "
        "content), deepseek-legacy (both) [the server's --reasoning-format]",
    )
    reasoning_control: bool = Field(
        False, description="Allow POST /v1/chat/completions/control to end this reasoning"
    )
    echo: bool = Field(
        False, description="Include a continued (prefilled) assistant message in the output"
    )
    continue_final_message: ContinueFinal | None = Field(
        None,
        description="Continue the last assistant message: true or 'content' continues its "
        "content, 'reasoning_content' its reasoning. Default: when the last message is the "
        "assistant's",
    )
    add_generation_prompt: bool | None = Field(
        None, description="Open a new assistant turn (default: unless continuing one)"
    )


class ControlRequest(BaseModel):
    """`POST /v1/chat/completions/control`: act on a running completion."""

    model_config = ConfigDict(extra="ignore")

    id: str | None = Field(None, description="The `id` streamed by /v1/chat/completions")
    action: str | None = Field(None, description="Only 'reasoning_end'")
    model: str | None = Field(None, description="Ignored (router mode only)")


class ControlResponse(BaseModel):
    success: bool
    message: str | None = Field(None, description="Why it did not succeed")


# ---------------------------------------------------------------------------- response


class PromptTokensDetails(BaseModel):
    cached_tokens: int = Field(description="Prompt tokens reused from the slot's cache")


class CompletionTokensDetails(BaseModel):
    reasoning_tokens: int = Field(description="Generated tokens inside the reasoning block")


class CompletionUsage(BaseModel):
    prompt_tokens: int = Field(description="All prompt tokens, cached ones included")
    completion_tokens: int = Field(description="Generated tokens over all choices")
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails
    completion_tokens_details: CompletionTokensDetails


class FunctionCall(BaseModel):
    name: str | None = None
    arguments: str | None = Field(None, description="JSON text of the arguments")


class ChatToolCall(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatToolCallChunk(ChatToolCall):
    index: int = Field(description="Position among this choice's tool calls")


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None


class TokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChoiceLogprobs(BaseModel):
    content: list[TokenLogprob] | None


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    reasoning_content: str | None = Field(None, description="Present when the model reasoned")
    tool_calls: list[ChatToolCall] | None = Field(None, description="Present when it called tools")


FinishReason = Literal["stop", "length", "tool_calls"]


class ChatChoice(BaseModel):
    index: int
    message: AssistantMessage
    logprobs: ChoiceLogprobs | None
    finish_reason: FinishReason


class Timings(BaseModel):
    """llama-server's per-request timings (prompt processing and generation)."""

    cache_n: int
    prompt_n: int
    prompt_ms: float
    prompt_per_token_ms: float
    prompt_per_second: float
    predicted_n: int
    predicted_ms: float
    predicted_per_token_ms: float
    predicted_per_second: float
    draft_n: int | None = Field(None, description="Tokens drafted (with --spec-type only)")
    draft_n_accepted: int | None = Field(None, description="Drafted tokens kept")


class ChatCompletion(BaseModel):
    id: str = Field(description="chatcmpl-…; shared by all choices (and the control endpoint)")
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    system_fingerprint: str
    choices: list[ChatChoice]
    usage: CompletionUsage
    timings: Timings | None = None


class ChoiceDelta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[ChatToolCallChunk] | None = None


class ChunkChoice(BaseModel):
    index: int
    delta: ChoiceDelta
    logprobs: ChoiceLogprobs | None = None
    finish_reason: FinishReason | None = None


class ChatCompletionChunk(BaseModel):
    """One `data:` event of a stream; the stream ends with `data: [DONE]`."""

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    system_fingerprint: str
    choices: list[ChunkChoice]
    usage: CompletionUsage | None = Field(
        None, description="Only in the last chunk, with include_usage"
    )
    timings: Timings | None = Field(None, description="With a choice's finish_reason")
