"""The `/infill` body as llama-server b11434 reads it: the native `/completion` options, plus the
code around the gap (`input_prefix`, `input_suffix`) and other files (`input_extra`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from ..completion.protocol import NativeCompletionRequest

__all__ = ["InfillChunk", "InfillRequest"]

# A text, or texts and token ids mixed
InfillText = str | list[StrictInt | str]


class InfillChunk(BaseModel):
    """One file of extra context."""

    model_config = ConfigDict(extra="ignore")

    text: StrictStr = Field(description="The file's contents")
    filename: StrictStr = Field("tmp", description="Its name, written before it")


class InfillRequest(NativeCompletionRequest):
    """`POST /infill`. Unknown fields are ignored, as llama-server does."""

    prompt: StrictStr = Field(
        "", description="Text the completion continues from, placed right after the prefix"
    )
    input_prefix: InfillText | None = Field(None, description="The code before the gap")
    input_suffix: InfillText | None = Field(None, description="The code after the gap")
    input_extra: list[InfillChunk] = Field(
        default_factory=list, description="Other files, put before the FIM prefix"
    )
