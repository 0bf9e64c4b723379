"""The suite's tiny synthetic checkpoints: the builders live in the package
(`llamactl.converters.examples`, what `llamactl convert --example` writes); this adds the
session cache and the GGUF helpers the tests share.

    from synthetic_checkpoints import build
    path = build("lfm2-d1", tmp_path / "d1")                 # any of BUILDERS
    path = build("llama", tmp_path / "llama", bf16=True, shards=2)
    base = build("qwen35-base", tmp_path / "base")           # for lev / kev adapters
    lev = build("lev", tmp_path / "lev", base=base)

Shared for a whole session: `cached(tmp_path_factory, "lfm2-d1", bf16=True)`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest
from llamactl.converters import trunk_plan
from llamactl.converters.examples import (
    BUILDERS,
    CHAT_EXAMPLES,
    FAMILIES,
    H2O_NOUL_FLOOR,
    H2O_SYSTEM,
    H2O_TEMPERATURE,
    HIDDEN,
    KEV_HEAD_DIM,
    KEV_TEMPERATURE,
    OMNI_TEMPERATURES,
    QWEN_PREPROCESSOR,
    QWEN_VISION,
    build,
    tokenizer_files,
    vocab_size,
    write_torch_file,
)

from llamactl.core.gguf_info import read_gguf_info
from llamactl.engine.decision.trunk import write_trunk

__all__ = [
    "BUILDERS",
    "CHAT_EXAMPLES",
    "FAMILIES",
    "H2O_NOUL_FLOOR",
    "H2O_SYSTEM",
    "H2O_TEMPERATURE",
    "HIDDEN",
    "KEV_HEAD_DIM",
    "KEV_TEMPERATURE",
    "OMNI_TEMPERATURES",
    "QWEN_PREPROCESSOR",
    "QWEN_VISION",
    "build",
    "cached",
    "read_gguf",
    "read_tensor",
    "tokenizer_files",
    "vocab_size",
    "write_chat_copy",
    "write_torch_file",
    "write_trunk_copy",
]

_CACHE: dict[tuple[Any, ...], Path] = {}


def cached(factory: pytest.TempPathFactory, name: str, **options: Any) -> Path:
    """`build` once per test session for each (name, options); lev/kev get a cached base."""
    key = (str(factory.getbasetemp()), name, tuple(sorted(options.items())))
    if key not in _CACHE:
        if name in ("lev", "kev") and "base" not in options:
            options = {**options, "base": cached(factory, "qwen35-base")}
        _CACHE[key] = build(name, factory.mktemp(name.replace("-", "_")), **options)
    return _CACHE[key]


# ----------------------------------------------------------------- GGUF helpers
def read_gguf(path: Path) -> tuple[dict[str, Any], dict[str, tuple[tuple[int, ...], str]]]:
    """(metadata, {tensor name: (shape in ggml order, type name)}) of a GGUF file."""
    reader = gguf.GGUFReader(path)
    meta = {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    tensors = {t.name: (tuple(int(d) for d in t.shape), t.tensor_type.name) for t in reader.tensors}
    return meta, tensors


def read_tensor(path: Path, name: str) -> np.ndarray:
    """One tensor as float32 in numpy order (F32/F16 files)."""
    t = next(t for t in gguf.GGUFReader(path).tensors if t.name == name)
    return np.asarray(t.data, dtype=np.float32).reshape(tuple(reversed([int(d) for d in t.shape])))


def write_trunk_copy(src: Path, dst: Path) -> list[str]:
    """A copy of a converted decision GGUF without its head, written by the engine's own code
    from the converters' plan; returns the dropped tensor names."""
    info = read_gguf_info(src)
    decision_type = info.get(f"{info.architecture}.decision.type")
    plan = trunk_plan(decision_type, [t.name for t in info.tensors], info.metadata)
    write_trunk(info, plan, dst, progress=False)
    return list(plan.head)


def write_chat_copy(src: Path, dst: Path) -> Path:
    """The decision GGUF's trunk as a plain chat model: no head, no decision keys."""
    info = read_gguf_info(src)
    arch = info.architecture
    plan = trunk_plan(
        info.get(f"{arch}.decision.type"), [t.name for t in info.tensors], info.metadata
    )
    decision = tuple(k for k in info.metadata if ".decision." in k or k.startswith("decision."))
    plan = dataclasses.replace(
        plan,
        drop_keys=plan.drop_keys + decision,
        overrides={k: v for k, v in plan.overrides.items() if k not in decision},
    )
    write_trunk(info, plan, dst, progress=False)
    return dst
