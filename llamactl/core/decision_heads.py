"""Decision heads the pinned llama.cpp does not load (converters and engine both follow this).

Its `lfm2` and `qwen35` architectures load no `cls.output` (nor d1-omni's head blocks), and its
loader refuses a file holding tensors the architecture does not load ("done_getting_tensors:
wrong number of tensors"). Those GGUFs are still written in llama.cpp's own layout; to run them
with the pinned llama.cpp, the engine makes a trunk-only copy and applies the head in numpy.
These helpers say which tensors are the head and what metadata the trunk-only copy needs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .decision_keys import head_block_count_key

# decision types whose GGUF holds a head the pinned llama.cpp refuses; the others (openjev,
# lev, lfm2-d1, h2o-lightning: label readouts) load as they are
WITH_HEAD = frozenset({"kev", "openbmb-minicpm-ocr-jev", "lfm2-d1-omni"})
_CLS = ("cls.output.weight", "cls.output.bias")
_OMNI_GLOBAL = (
    "token_types.weight",
    "cls.norm.weight",
    "cls.norm.bias",
    "cls.weight",
    "cls.bias",
    *_CLS,
)


def loads_natively(decision_type: str) -> bool:
    return decision_type not in WITH_HEAD


def head_tensors(
    decision_type: str,
    tensor_names: Iterable[str],
    *,
    block_count: int | None = None,
    head_layers: int | None = None,
) -> list[str]:
    """The names among `tensor_names` that form the decision head (empty for label readouts).

    For lfm2-d1-omni pass `block_count` (`lfm2.block_count`) and `head_layers`
    (`lfm2.decision.block_count`): the last `head_layers` blocks are the head.
    """
    names = list(tensor_names)
    if decision_type in ("kev", "openbmb-minicpm-ocr-jev"):
        return [n for n in names if n in _CLS]
    if decision_type != "lfm2-d1-omni":
        return []
    if block_count is None or head_layers is None:
        raise ValueError("lfm2-d1-omni needs block_count and head_layers")
    first = block_count - head_layers
    return [
        n
        for n in names
        if n in _OMNI_GLOBAL or ((block := _block(n)) is not None and block >= first)
    ]


def _block(name: str) -> int | None:
    parts = name.split(".")
    if len(parts) > 2 and parts[0] == "blk" and parts[1].isdecimal():
        return int(parts[1])
    return None


def trunk_metadata(decision_type: str, metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The metadata values a trunk-only copy must change (keys as in the GGUF).

    d1-omni: the block count shrinks to the trunk and the per-layer arrays are cut to it; the
    trunk keeps `causal_attention = false` (the engine may also set it per context).
    """
    if decision_type != "lfm2-d1-omni":
        return {}
    arch = "lfm2"
    n_trunk = int(metadata[f"{arch}.block_count"]) - int(metadata[head_block_count_key(arch)])
    out: dict[str, Any] = {f"{arch}.block_count": n_trunk}
    for key in (f"{arch}.feed_forward_length", f"{arch}.attention.head_count_kv"):
        value = metadata.get(key)
        if isinstance(value, (list, tuple)):
            out[key] = list(value)[:n_trunk]
    return out


@dataclass(frozen=True)
class TrunkPlan:
    """How to make the trunk-only copy of a decision GGUF: the one description both the
    engine's copy and anyone else's (tests, tools) follow."""

    head: tuple[str, ...]  # tensors left out
    overrides: dict[str, Any] = field(default_factory=dict)  # metadata values rewritten
    drop_keys: tuple[str, ...] = ()  # metadata entries left out


def trunk_plan(
    decision_type: str, tensor_names: Iterable[str], metadata: Mapping[str, Any]
) -> TrunkPlan:
    """The trunk-only copy of a file with these tensors and metadata.

    `{arch}.embedding_length_out` is left out: the pinned llama.cpp sizes the embedding rows
    it returns by it (the head's width), which would garble the trunk's hidden states.
    """
    arch = metadata.get("general.architecture", "")
    head = head_tensors(
        decision_type,
        tensor_names,
        block_count=metadata.get(f"{arch}.block_count"),
        head_layers=metadata.get(head_block_count_key(arch)),
    )
    drop = (f"{arch}.embedding_length_out",) if f"{arch}.embedding_length_out" in metadata else ()
    return TrunkPlan(tuple(head), trunk_metadata(decision_type, metadata), drop)
