"""The rerank body as llama-server reads it: Jina's API (`documents`, answered with `results`),
or Hugging Face TEI's (`texts`, answered with a bare list, `return_text`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, StrictStr

__all__ = ["RerankRequest"]


class RerankRequest(BaseModel):
    """`POST /v1/rerank`. Unknown fields are ignored, as llama-server does."""

    model_config = ConfigDict(extra="ignore")

    query: StrictStr | None = Field(None, description="The text the documents are ranked for")
    documents: list[StrictStr] | None = Field(
        None, description="The texts to rank (Jina's API): answered as `results`"
    )
    texts: list[StrictStr] | None = Field(
        None, description="TEI's name for `documents`: answered as a bare list with `score`"
    )
    top_n: int | None = Field(
        None, ge=0, description="Keep the best N results (default: all), best first"
    )
    return_documents: bool = Field(
        False, description="Jina / Cohere: each result carries `document: {text}`"
    )
    return_text: bool = Field(False, description="TEI: each result carries its `text`")
    model: str | None = Field(None, description="Echoed; any name is this server's model")
