"""Request and response shapes of the token routes, as llama-server b11434 spells them."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt

__all__ = [
    "DetokenizeRequest",
    "DetokenizeResponse",
    "InputTokensResponse",
    "PromptResponse",
    "TokenPiece",
    "TokenizeRequest",
    "TokenizeResponse",
]


class _Body(BaseModel):
    """Unknown fields are ignored, as llama-server does."""

    model_config = ConfigDict(extra="ignore")


class TokenizeRequest(_Body):
    content: str | list[str | StrictInt] = Field(
        "",
        description="Text to tokenize; or a list mixing texts and token ids (ids are kept as "
        "they are, texts tokenized in place)",
    )
    add_special: bool = Field(False, description="Insert special tokens such as BOS")
    parse_special: bool = Field(True, description="Read special-token text as special tokens")
    with_pieces: bool = Field(False, description="Return each token with the text it renders")


class TokenPiece(BaseModel):
    id: int
    piece: str | list[int] = Field(
        description="The token's text; its bytes when they are not valid UTF-8 on their own"
    )


class TokenizeResponse(BaseModel):
    tokens: list[int] | list[TokenPiece]


class DetokenizeRequest(_Body):
    tokens: list[StrictInt] = Field(default_factory=list, description="Token ids to render")


class DetokenizeResponse(BaseModel):
    content: str


class PromptResponse(BaseModel):
    prompt: str = Field(description="The chat rendered by the model's template, not generated")


class InputTokensResponse(BaseModel):
    object: Literal["response.input_tokens"] = "response.input_tokens"
    input_tokens: int
