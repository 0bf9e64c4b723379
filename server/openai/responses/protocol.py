"""Request bodies of the Responses API, as pydantic models (the OpenAPI schema is the contract).

Items and content parts are unions keyed by `type`. Pydantic would name a failing union branch
in the error location (`input.list[...].0.message.role`), so `ByType` dispatches on `type`
itself: errors then read `Field 'input.0.role': ...`, and the schema still lists every shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeAlias, get_args

from pydantic import BaseModel, ConfigDict, Field, GetCoreSchemaHandler, TypeAdapter
from pydantic_core import PydanticCustomError, core_schema


@dataclass(frozen=True)
class ByType:
    """Annotates a union of models: the value's `type` (or `default`) picks the member. Each
    member's `type` is a `Literal` of the names it takes; a member whose `type` is a plain `str`
    takes every other name (hosted tools)."""

    what: str
    default: str | None = None

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> Any:
        kinds: dict[str, type[BaseModel]] = {}
        fallback: type[BaseModel] | None = None
        for model in get_args(source):
            names = get_args(model.model_fields["type"].annotation)
            if names:
                kinds.update(dict.fromkeys(names, model))
            else:
                fallback = model
        models = get_args(source)
        what, default = self.what, self.default

        def validate(value: Any, _handler: Any) -> Any:
            if isinstance(value, models):
                return value
            if not isinstance(value, dict):
                raise PydanticCustomError("object_type", f"each {what} must be an object")
            kind = value.get("type", default)
            model = kinds.get(kind) if isinstance(kind, str) else None
            if model is None and fallback is not None and isinstance(kind, str):
                model = fallback
            if model is None:
                raise PydanticCustomError(
                    "unknown_type",
                    "Cannot determine type of '{what}': 'type' must be one of {kinds}, got {got}",
                    {"what": what, "kinds": ", ".join(sorted(kinds)), "got": repr(kind)},
                )
            return model.model_validate(value)

        return core_schema.no_info_wrap_validator_function(validate, handler(source))


@dataclass(frozen=True)
class StrOrList:
    """Annotates `str | list[item]`: errors are located inside the list, not at a union branch."""

    what: str

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> Any:
        listed = next(arg for arg in get_args(source) if arg is not str)
        adapter = TypeAdapter(listed)
        what = self.what

        def validate(value: Any, _handler: Any) -> Any:
            if isinstance(value, str):
                return value
            if isinstance(value, list):
                return adapter.validate_python(value)
            raise PydanticCustomError("str_or_list", f"{what} must be a string or a list")

        return core_schema.no_info_wrap_validator_function(validate, handler(source))


class _Model(BaseModel):
    """Unknown fields are ignored, as OpenAI's own server keeps adding optional ones."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)


# ------------------------------------------------------------------------ content parts


class InputText(_Model):
    type: Literal["input_text"]
    text: str


class OutputText(_Model):
    type: Literal["output_text"]
    text: str
    annotations: list[Any] = Field(default_factory=list)
    logprobs: list[Any] | None = None


class Refusal(_Model):
    type: Literal["refusal"]
    refusal: str


class InputImage(_Model):
    type: Literal["input_image"]
    image_url: str | None = None
    file_id: str | None = None
    detail: str | None = None


class InputFile(_Model):
    type: Literal["input_file"]
    file_id: str | None = None
    file_data: str | None = None
    file_url: str | None = None
    filename: str | None = None


ContentPart: TypeAlias = Annotated[
    InputText | OutputText | Refusal | InputImage | InputFile, ByType("content part")
]
Content: TypeAlias = Annotated[str | list[ContentPart], StrOrList("content")]
Output: TypeAlias = Annotated[str | list[ContentPart], StrOrList("output")]


# -------------------------------------------------------------------------------- items


class MessageItem(_Model):
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: Content
    id: str | None = None
    status: str | None = None


class FunctionCallItem(_Model):
    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str
    id: str | None = None
    status: str | None = None


class FunctionCallOutputItem(_Model):
    type: Literal["function_call_output"]
    # Codex CLI also sends outputs that answer no call (its own context, e.g. a goal):
    # no call_id, a `name` and a `namespace` instead
    call_id: str | None = None
    output: Output
    id: str | None = None
    status: str | None = None
    name: str | None = None
    namespace: str | None = None


class SummaryText(_Model):
    type: Literal["summary_text"] = "summary_text"
    text: str


class ReasoningText(_Model):
    type: Literal["reasoning_text"] = "reasoning_text"
    text: str


class ReasoningItem(_Model):
    type: Literal["reasoning"]
    id: str | None = None
    summary: list[SummaryText] = Field(default_factory=list)
    content: list[ReasoningText] | None = None
    encrypted_content: str | None = None
    status: str | None = None


class ItemReference(_Model):
    """An item of a stored response, by id."""

    type: Literal["item_reference"]
    id: str


InputItem: TypeAlias = Annotated[
    MessageItem | FunctionCallItem | FunctionCallOutputItem | ReasoningItem | ItemReference,
    ByType("item", default="message"),
]
# An item as the conversation keeps it: references resolved to what they name
ResolvedItem: TypeAlias = Annotated[
    MessageItem | FunctionCallItem | FunctionCallOutputItem | ReasoningItem,
    ByType("item", default="message"),
]
RESOLVED_ITEM: TypeAdapter[ResolvedItem] = TypeAdapter(ResolvedItem)
Input: TypeAlias = Annotated[str | list[InputItem], StrOrList("input")]

# ------------------------------------------------------------------------------- tools


class FunctionTool(_Model):
    type: Literal["function"]
    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class OtherTool(BaseModel):
    """Hosted tools (web_search, file_search...): accepted and skipped, as llama-server does."""

    model_config = ConfigDict(extra="allow")
    type: str


Tool: TypeAlias = Annotated[FunctionTool | OtherTool, ByType("tool")]


# ----------------------------------------------------------------- text and reasoning


class TextFormatText(_Model):
    type: Literal["text"]


class TextFormatJSONObject(_Model):
    type: Literal["json_object"]


class TextFormatJSONSchema(_Model):
    type: Literal["json_schema"]
    name: str | None = None
    json_schema: dict[str, Any] = Field(alias="schema")
    description: str | None = None
    strict: bool | None = None


TextFormat: TypeAlias = Annotated[
    TextFormatText | TextFormatJSONObject | TextFormatJSONSchema, ByType("text.format")
]


class TextConfig(_Model):
    format: TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


class ReasoningConfig(_Model):
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None
    max_tokens: int | None = Field(
        default=None,
        ge=0,
        description="llamactl extension: reasoning tokens before the end of reasoning is forced",
    )


# ---------------------------------------------------------------------------- requests


class ResponseInputFields(_Model):
    """What decides the prompt; shared by `/v1/responses` and `/v1/responses/input_tokens`."""

    model: str | None = None
    input: Input | None = None
    instructions: str | None = None
    previous_response_id: str | None = None
    tools: list[Tool] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    reasoning: ReasoningConfig | None = None
    chat_template_kwargs: dict[str, Any] | None = Field(
        default=None, description="llamactl extension: extra variables for the chat template"
    )


class ResponsesRequest(ResponseInputFields):
    input: Input
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stream: bool = False
    store: bool | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    truncation: Literal["auto", "disabled"] | None = None
    background: bool | None = None
    include: list[str] | None = None
    top_logprobs: int | None = None
    service_tier: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    stream_options: dict[str, Any] | None = None
    # llama-server's sampling extensions
    seed: int | None = None
    top_k: int | None = None
    min_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repeat_penalty: float | None = None
    sse_ping_interval: int | None = None
    return_progress: bool = False  # llama-server: `prompt_progress` on response.in_progress


class InputTokensRequest(ResponseInputFields):
    """`POST /v1/responses/input_tokens`: the prompt a `/v1/responses` call would decode."""
