"""Bodies of `POST /v1/completions` (OpenAI's legacy text completions, llama-server's fields).

The sampling fields are the chat endpoint's (`openai_chat.protocol.SamplingFields`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from ..chat.protocol import CompletionUsage, SamplingFields, Timings

Prompt = str | list[str] | list[int] | list[list[int]]


class CompletionRequest(SamplingFields):
    """`POST /v1/completions`. Unknown fields are ignored, as llama-server does."""

    prompt: Prompt = Field(
        description="A string, a list of token ids, or a list of either (one result per "
        "prompt, each with `n` choices). Strings get the model's BOS and may hold special "
        "tokens written out"
    )
    echo: bool = Field(False, description="Only false is supported (as llama-server)")
    logprobs: int | None = Field(
        None, description="0..20: each token's log-probability plus this many top alternatives"
    )
    suffix: str | None = Field(None, description="Not supported: fill-in-the-middle is not offered")


class CompletionLogprobs(BaseModel):
    """OpenAI's legacy shape: parallel lists, one entry per generated token."""

    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]]
    text_offset: list[int] = Field(description="Each token's offset in the choice's text")


class CompletionChoice(BaseModel):
    index: int = Field(description="prompt index × n + choice")
    text: str
    logprobs: CompletionLogprobs | None
    finish_reason: Literal["stop", "length"] | None


class TextCompletion(BaseModel):
    """The response, and (with `stream: true`) each `data:` event, ending with `[DONE]`."""

    id: str = Field(description="cmpl-…, shared by every choice and chunk")
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    system_fingerprint: str
    choices: list[CompletionChoice]
    usage: CompletionUsage | None = Field(
        None, description="In a stream: only the last chunk, if asked"
    )
    timings: Timings | None = None
