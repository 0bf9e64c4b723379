"""Request and response shapes of `/v1/systemone` and `/v1/decisions`, for the OpenAPI
document. Bodies are validated by the engine (`llamactl.engine.decision.request`), not by
these models, so errors carry the spec's messages and a non-decision model answers 501 before
its body is read."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ...schema import inline_schema


class SystemOneQuestion(BaseModel):
    type: Literal["choice", "score", "noul"] = Field(
        description="choice: pick one option; score: 2 to 10 ordered levels; noul: yes/no"
    )
    instructions: Any = Field(description="The question (any JSON; required)")
    criteria: Any = Field(
        None,
        description="choice: {option key: description or null}; score: [level descriptions, "
        'lowest first]; noul: optional {"true": ..., "false": ...}',
    )


class SystemOneRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    state: Any = Field(
        description="What the questions are about: a string, an object or an array (objects "
        "keep their key order); null only for lfm2-d1 and lfm2-d1-omni. A list of chat "
        "messages may carry image_url parts, which are taken out as images."
    )
    questions: dict[str, SystemOneQuestion] = Field(description="Question id -> question")
    model: str | None = Field(None, description="Ignored: the loaded model answers")
    images: list[str] | None = Field(
        None, description="Up to 8 data URLs (data:image/...;base64,...); alias `files`"
    )
    videos: list[Any] | None = Field(None, description="Not supported: absent, null or []")


class ChoiceAnswer(BaseModel):
    type: Literal["choice"]
    choice: str
    probabilities: dict[str, float]
    confidence: float


class ScoreAnswer(BaseModel):
    type: Literal["score"]
    score: float = Field(description="The expected level, sum of i * p_i")
    legend: dict[str, Any]
    probabilities: dict[str, float]
    confidence: float


class NoulAnswer(BaseModel):
    type: Literal["noul"]
    noul: float = Field(description="The probability of yes")


Answer = ChoiceAnswer | ScoreAnswer | NoulAnswer


class SystemOneUsage(BaseModel):
    input_tokens: int = Field(description="Prompt tokens over every question's prompt")
    output_tokens: int = Field(0, description="Always 0: nothing is generated")


class SystemOneResponse(BaseModel):
    model: str
    answers: dict[str, Answer]
    usage: SystemOneUsage


class DecisionQuestion(SystemOneQuestion):
    id: str = Field(description="The question's id, unique in the request")


class DecisionsRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str | None = Field(None, description="This server's model (checked like chat)")
    input: Any = Field(description="The state the questions are about (alias `state`)")
    questions: list[DecisionQuestion] | dict[str, SystemOneQuestion] = Field(
        description="An array of questions with ids, or an object id -> question"
    )
    images: list[str] | None = Field(None, description="Up to 8 image data URLs")


class DecisionItem(BaseModel):
    model_config = ConfigDict(extra="allow")

    index: int
    id: str
    type: Literal["choice", "score", "noul"]


class InputTokensDetails(BaseModel):
    cached_tokens: int = Field(description="Prompt tokens copied from a shared prefix")


class DecisionsUsage(BaseModel):
    input_tokens: int
    output_tokens: int = 0
    total_tokens: int
    input_tokens_details: InputTokensDetails


class DecisionsResponse(BaseModel):
    id: str
    object: Literal["decision"] = "decision"
    created: int
    model: str
    answers: list[DecisionItem] = Field(
        description="One per question, in request order, with the fields of its type"
    )
    usage: DecisionsUsage


def body_doc(model: type[BaseModel]) -> dict[str, Any]:
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": inline_schema(model)}},
        }
    }
