"""The shapes a decision request and its answers take inside the engine."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

QuestionType = Literal["choice", "score", "noul"]
QUESTION_TYPES: tuple[QuestionType, ...] = ("choice", "score", "noul")


@dataclass(frozen=True)
class Option:
    key: str
    description: Any = None  # the request's raw JSON value (a string, null, or anything)


@dataclass(frozen=True)
class Question:
    id: str
    type: QuestionType
    instructions: Any
    options: tuple[Option, ...]  # request order (noul: as the model type orders true/false)
    levels: tuple[Any, ...] = ()  # score: the level descriptions, lowest first


@dataclass(frozen=True)
class Media:
    """One image (or, for d1-omni, audio clip) from a data URL."""

    kind: Literal["image", "audio"]
    mime: str
    data: bytes


@dataclass(frozen=True)
class DecisionRequest:
    state: Any
    questions: tuple[Question, ...]
    media: tuple[Media, ...] = ()


@dataclass
class Answer:
    """One question's answer, rendered by `as_dict` in the spec's key order."""

    type: QuestionType
    choice: str | None = None
    score: float | None = None
    noul: float | None = None
    legend: dict[str, Any] | None = None
    probabilities: dict[str, float] | None = None
    confidence: float | None = None

    def as_dict(self) -> dict[str, Any]:
        if self.type == "noul":
            return {"type": "noul", "noul": self.noul}
        out: dict[str, Any] = {"type": self.type}
        if self.type == "choice":
            out["choice"] = self.choice
        else:
            out["score"] = self.score
            out["legend"] = self.legend
        out["probabilities"] = self.probabilities
        out["confidence"] = self.confidence
        return out


@dataclass
class DecisionResult:
    answers: dict[str, Answer]
    input_tokens: int  # every task's prompt tokens (the state counts once per question)
    cached_tokens: int = 0  # of those, copied from a shared prefix instead of decoded
    timings: dict[str, float] = field(default_factory=dict)

    def usage(self) -> dict[str, int]:
        return {"input_tokens": self.input_tokens, "output_tokens": 0}
