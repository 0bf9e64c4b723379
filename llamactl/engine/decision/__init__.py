"""Decision models: score questions about a state in one forward pass, with no generation.

`load_decision_model(path)` opens a decision GGUF (running a trunk-only copy plus a numpy head
where the pinned llama.cpp refuses the head), `DecisionEngine` scores requests on it, batched
across slots with a shared prompt prefix decoded once. See docs/decisions.md.
"""

from __future__ import annotations

from llamactl.core.errors import DecisionNotSupportedError

from .engine import DecisionConfig, DecisionEngine
from .loader import DecisionModel, decision_type_of, find_mmproj, load_decision_model
from .registry import TYPES, DecisionType
from .types import Answer, DecisionRequest, DecisionResult, Question

__all__ = [
    "TYPES",
    "Answer",
    "DecisionConfig",
    "DecisionEngine",
    "DecisionModel",
    "DecisionNotSupportedError",
    "DecisionRequest",
    "DecisionResult",
    "DecisionType",
    "Question",
    "decision_type_of",
    "find_mmproj",
    "load_decision_model",
]
