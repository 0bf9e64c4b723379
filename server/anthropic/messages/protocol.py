"""Wire models of Anthropic's Messages API: the request bodies we accept and the message we return.

Strings where Anthropic also takes a list of blocks (`content`, `system`, a tool result's
`content`) are turned into one text block before validation, so every error location reads as a
plain path such as `messages.0.content.1.text` instead of naming pydantic's union branches.
Unknown top-level fields are ignored, as llama-server does, so newer SDKs keep working.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

StopReason = Literal[
    "end_turn", "max_tokens", "stop_sequence", "tool_use", "model_context_window_exceeded"
]

# Anthropic block types llamactl cannot take; accepted by the schema so the refusal can say
# what is unsupported instead of "unknown tag".
UNSUPPORTED_BLOCKS = (
    "document",
    "search_result",
    "container_upload",
    "server_tool_use",
    "web_search_tool_result",
    "web_fetch_tool_result",
    "code_execution_tool_result",
    "bash_code_execution_tool_result",
    "text_editor_code_execution_tool_result",
    "tool_search_tool_result",
    "mcp_tool_use",
    "mcp_tool_result",
)


class _Lenient(BaseModel):
    """Extra keys (cache_control, citations, ...) are accepted and ignored."""

    model_config = ConfigDict(extra="ignore")


def _as_blocks(value: Any) -> Any:
    return [{"type": "text", "text": value}] if isinstance(value, str) else value


# ------------------------------------------------------------------------------ content blocks
class TextBlockParam(_Lenient):
    type: Literal["text"]
    text: str


class UnsupportedBlockParam(_Lenient):
    """Images, documents and server-tool blocks: refused later with a message naming them."""

    model_config = ConfigDict(extra="allow")
    type: Literal[UNSUPPORTED_BLOCKS]  # type: ignore[valid-type]


class ImageSourceParam(_Lenient):
    type: Literal["base64", "url", "file"] = Field(
        description="'base64' (with media_type and data); 'url' and 'file' are refused: "
        "llamactl never downloads"
    )
    media_type: str | None = Field(None, description="image/png, image/jpeg, ...")
    data: str | None = Field(None, description="The image file, base64")
    url: str | None = None


class ImageBlockParam(_Lenient):
    """An image in a user turn; needs a model served with its --mmproj."""

    type: Literal["image"]
    source: ImageSourceParam


class ToolUseBlockParam(_Lenient):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any] = Field(default_factory=dict)


ToolResultPart = Annotated[TextBlockParam | UnsupportedBlockParam, Field(discriminator="type")]


class ToolResultBlockParam(_Lenient):
    type: Literal["tool_result"]
    tool_use_id: str
    content: list[ToolResultPart] = Field(default_factory=list)
    is_error: bool = False

    _blocks = field_validator("content", mode="before")(_as_blocks)


class ThinkingBlockParam(_Lenient):
    type: Literal["thinking"]
    thinking: str
    signature: str | None = None  # ours is a digest; any value (or none) is accepted back


class RedactedThinkingBlockParam(_Lenient):
    type: Literal["redacted_thinking"]
    data: str = ""


ContentBlockParam = Annotated[
    TextBlockParam
    | ToolUseBlockParam
    | ToolResultBlockParam
    | ThinkingBlockParam
    | RedactedThinkingBlockParam
    | ImageBlockParam
    | UnsupportedBlockParam,
    Field(discriminator="type"),
]


class MessageParam(_Lenient):
    # "system": instructions among the turns (Claude Code sends one after the first user turn)
    role: Literal["user", "assistant", "system"]
    content: list[ContentBlockParam]

    _blocks = field_validator("content", mode="before")(_as_blocks)


# ------------------------------------------------------------------------------- tools, thinking
class ToolParam(_Lenient):
    """A client tool; Anthropic's server tools (web search, bash, ...) cannot run here."""

    name: str = Field(min_length=1, max_length=128)
    description: str | None = None
    input_schema: dict[str, Any]
    type: Literal["custom"] | None = None

    @model_validator(mode="before")
    @classmethod
    def _client_tools_only(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("type") not in (None, "custom"):
            raise ValueError(
                f"server tools (type '{data.get('type')}') are not supported; "
                "define client tools with name, description and input_schema"
            )
        return data


class ToolChoiceParam(_Lenient):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None

    @model_validator(mode="after")
    def _tool_needs_name(self) -> ToolChoiceParam:
        if self.type == "tool" and not self.name:
            raise ValueError("tool_choice of type 'tool' needs the tool's 'name'")
        return self


DEFAULT_THINKING_BUDGET = 10000  # llama-server's value when `budget_tokens` is left out


class ThinkingParam(_Lenient):
    """`enabled` with a budget, `disabled`, or the model's own choice (`adaptive`,
    `between_tools`). Budgets below Anthropic's 1024 floor are allowed: small local models
    and short answers need them."""

    type: Literal["enabled", "disabled", "adaptive", "between_tools"]
    budget_tokens: int | None = Field(default=None, ge=1)
    # "updates" (Claude Code 2.1.3xx, a beta) streams thinking as it comes, as "summarized"
    # does here: a local model's thinking is never summarised
    display: Literal["summarized", "omitted", "updates"] | None = None


class MetadataParam(_Lenient):
    user_id: str | None = None


# ------------------------------------------------------------------------------------ requests
class CountTokensRequest(_Lenient):
    """What shapes the prompt; `POST /v1/messages/count_tokens` takes exactly this."""

    model: str
    messages: list[MessageParam] = Field(min_length=1)
    system: list[TextBlockParam] | None = None
    tools: list[ToolParam] | None = None
    tool_choice: ToolChoiceParam | None = None
    thinking: ThinkingParam | None = None

    _system_blocks = field_validator("system", mode="before")(_as_blocks)


class MessagesRequest(CountTokensRequest):
    """`POST /v1/messages`."""

    max_tokens: int = Field(ge=1, le=2**31 - 1)
    stop_sequences: list[Annotated[str, Field(min_length=1)]] | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=1.0)
    top_p: float | None = Field(default=None, ge=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=0)
    stream: bool = False
    metadata: MetadataParam | None = None
    sse_ping_interval: int | None = None  # llama-server extension: seconds between SSE pings


# ----------------------------------------------------------------------------------- responses
class TextBlock(BaseModel):
    type: Literal["text"] = "text"
    text: str


class ThinkingBlock(BaseModel):
    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str


class ToolUseBlock(BaseModel):
    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict[str, Any]


ContentBlock = Annotated[TextBlock | ThinkingBlock | ToolUseBlock, Field(discriminator="type")]


class Usage(BaseModel):
    """`input_tokens` excludes the prompt tokens reused from the cache, as Anthropic counts."""

    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0


class Message(BaseModel):
    id: str
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    model: str
    content: list[ContentBlock]
    stop_reason: StopReason | None
    stop_sequence: str | None
    usage: Usage


class CountTokensResponse(BaseModel):
    input_tokens: int
