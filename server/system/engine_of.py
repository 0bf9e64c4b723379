"""The loaded engine of a state the gate let through."""

from __future__ import annotations

from llamactl import DecisionEngine, Engine

from ..errors import APIError
from ..state import ServerState

__all__ = ["loaded_engine"]


def loaded_engine(state: ServerState) -> Engine | DecisionEngine:
    engine = state.scheduler
    if engine is None:  # only between the gate and a failed load's cleanup
        raise APIError(503, state.load_error or "Loading model", "unavailable_error")
    return engine
