"""The GGUF metadata keys of a decision model: written by the converters, read by the engine.

Every key but the bare `decision.type` of early files is namespaced by the architecture
(`qwen35.decision.type`), as llama.cpp namespaces its own keys.
"""

from __future__ import annotations

from collections.abc import Container

BARE_TYPE_KEY = "decision.type"  # files converted before keys were namespaced
TEMPERATURE_INFIX = ".decision.temperature."


def type_key(arch: str) -> str:
    """The decision type (`openjev`, `lfm2-d1-omni`, ...): what makes a GGUF a decision model."""
    return f"{arch}.decision.type"


def temperature_key(arch: str, name: str) -> str:
    """A calibration temperature: `choice` | `score` | `noul`, optionally `.<bucket>`."""
    return f"{arch}{TEMPERATURE_INFIX}{name}"


def noul_floor_key(arch: str) -> str:
    """h2o-lightning's floor on a noul's probability (absent or 0: off)."""
    return f"{arch}.decision.noul_floor"


def head_block_count_key(arch: str) -> str:
    """lfm2-d1-omni: how many of the last blocks form the head (not the trunk)."""
    return f"{arch}.decision.block_count"


def has_decision_type(metadata: Container[str], arch: str | None) -> bool:
    """Whether a GGUF's metadata (any container with `in`) names a decision type; a file
    without an architecture can only name the bare one."""
    return BARE_TYPE_KEY in metadata or (arch is not None and type_key(arch) in metadata)


__all__ = [
    "BARE_TYPE_KEY",
    "TEMPERATURE_INFIX",
    "has_decision_type",
    "head_block_count_key",
    "noul_floor_key",
    "temperature_key",
    "type_key",
]
