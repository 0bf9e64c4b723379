"""The embeddings request, OpenAI's fields plus llama-server's (`content`, `embd_normalize`)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt

__all__ = ["EmbeddingInput", "EmbeddingsRequest"]

# A string; token ids, or texts and ids mixed (one input); or a list of such inputs
EmbeddingInput = str | list[StrictInt | str] | list[str | list[StrictInt | str]]


class EmbeddingsRequest(BaseModel):
    """`POST /v1/embeddings` (and the native `/embedding`, `/embeddings`). Unknown fields are
    ignored, as llama-server does."""

    model_config = ConfigDict(extra="ignore")

    input: EmbeddingInput | None = Field(
        None, description="Text(s) or token ids to embed: one vector per input"
    )
    content: EmbeddingInput | None = Field(
        None, description="llama-server's native name for `input` (native shape answered)"
    )
    model: str | None = None
    encoding_format: Literal["float", "base64"] = Field(
        "float", description="base64: little-endian float32 bytes, as OpenAI's SDK decodes"
    )
    embd_normalize: int | None = Field(
        None, ge=-1, description="llama-server: -1 none, 0 max-abs, 1 taxicab, 2 euclidean"
    )
    dimensions: int | None = Field(None, description="Not supported: the model's size is used")
