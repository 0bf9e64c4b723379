"""LoRA adapters on the chat engine's context (llama-server's `--lora`, `--lora-scaled`,
`GET/POST /lora-adapters`).

Adapters are loaded once against the model; their scales are global, the same for every
slot, because one `llama_decode` applies one set of adapters to the whole batch. A change of
scales is applied by the engine between two decode steps (`Engine.set_lora_scales`); `key`
names the current scales so that KV computed under other scales is never reused.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import llama_cpp

from llamactl.core.errors import InvalidRequestError, LlamactlError, ModelLoadError
from llamactl.core.gguf_info import read_gguf_info

from .model import Model

__all__ = ["LoraAdapter", "LoraSet", "LoraSpec", "check_lora_adapter"]

LoraSpec = tuple[str, float]  # (path, scale) as the flags give it
LoraKey = tuple[float, ...]  # every adapter's scale, in id order


@dataclass
class LoraAdapter:
    """One loaded adapter: what `/lora-adapters` lists about it."""

    id: int
    path: str
    scale: float
    handle: Any  # llama_adapter_lora_p
    task_name: str
    prompt_prefix: str
    alora_invocation_tokens: tuple[int, ...]

    def info(self, piece: Any = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "path": self.path,
            "scale": self.scale,
            "task_name": self.task_name,
            "prompt_prefix": self.prompt_prefix,
        }
        if self.alora_invocation_tokens:
            tokens = list(self.alora_invocation_tokens)
            if piece is not None:
                out["alora_invocation_string"] = "".join(piece(t) for t in tokens)
            out["alora_invocation_tokens"] = tokens
        return out


class LoraSet:
    """The adapters given at start, in id order, with their current global scales."""

    def __init__(self, model: Model, specs: Iterable[LoraSpec], *, apply: bool = True) -> None:
        self.adapters: list[LoraAdapter] = []
        try:
            for i, (path, scale) in enumerate(specs):
                self.adapters.append(_load(model, i, path, scale if apply else 0.0))
        except BaseException:
            self.close()
            raise

    def __bool__(self) -> bool:
        return bool(self.adapters)

    @property
    def key(self) -> LoraKey:
        """The current scales: KV computed under one key is not valid under another."""
        return tuple(a.scale for a in self.adapters)

    def info(self, piece: Any = None) -> list[dict[str, Any]]:
        return [a.info(piece) for a in self.adapters]

    def scales_from(self, entries: Any) -> LoraKey:
        """Scales from llama-server's `[{"id": 0, "scale": 0.5}, ...]`; an adapter left out
        gets scale 0, as llama-server reads the list."""
        if not isinstance(entries, list):
            raise InvalidRequestError("the LoRA list must be an array of {id, scale} objects")
        scales = [0.0] * len(self.adapters)
        for entry in entries:
            if not isinstance(entry, Mapping):
                raise InvalidRequestError("each LoRA entry must be an object with id and scale")
            ident, scale = entry.get("id"), entry.get("scale", 0.0)
            if isinstance(ident, bool) or not isinstance(ident, int):
                raise InvalidRequestError("a LoRA entry's id must be an integer")
            if not 0 <= ident < len(self.adapters):
                raise InvalidRequestError(
                    f"invalid LoRA adapter id {ident}: {len(self.adapters)} adapter(s) loaded"
                )
            if isinstance(scale, bool) or not isinstance(scale, (int, float)):
                raise InvalidRequestError("a LoRA entry's scale must be a number")
            scales[ident] = float(scale)
        return tuple(scales)

    def set_scales(self, scales: LoraKey) -> None:
        for adapter, scale in zip(self.adapters, scales, strict=True):
            adapter.scale = scale

    def apply(self, ctx: llama_cpp.llama_context_p) -> None:
        """Put the current scales on the context (adapters at scale 0 are left off)."""
        on = [a for a in self.adapters if a.scale != 0.0]
        handles = (llama_cpp.llama_adapter_lora_p_ctypes * len(on))(*(a.handle for a in on))
        scales = (ctypes.c_float * len(on))(*(a.scale for a in on))
        if llama_cpp.llama_set_adapters_lora(ctx, handles, len(on), scales) != 0:
            raise LlamactlError("llama.cpp refused the LoRA adapters for this context")

    def close(self) -> None:
        for adapter in self.adapters:
            llama_cpp.llama_adapter_lora_free(adapter.handle)
        self.adapters = []


def check_lora_adapter(path: str, architecture: str | None) -> Path:
    """The adapter file, when it is a LoRA adapter GGUF for `architecture` (what llama.cpp
    would only log); ModelLoadError naming what is wrong otherwise. Reads metadata only, so
    `llamactl serve` checks its adapters before it starts listening."""
    file = Path(os.path.expanduser(path))
    if not file.is_file():
        raise ModelLoadError(f"LoRA adapter file not found: {file}")
    info = read_gguf_info(file)  # ModelLoadError when it is not a GGUF
    adapter_type = info.get("adapter.type")
    if info.model_type != "adapter" or adapter_type != "lora":
        raise ModelLoadError(
            f"{file} is not a LoRA adapter GGUF (general.type {info.model_type!r},"
            f" adapter.type {adapter_type!r})"
        )
    if info.architecture != architecture:
        raise ModelLoadError(
            f"LoRA adapter {file} is for architecture {info.architecture!r};"
            f" the model is {architecture!r}"
        )
    return file


def _load(model: Model, ident: int, path: str, scale: float) -> LoraAdapter:
    file = check_lora_adapter(path, model.info.architecture)
    handle = llama_cpp.llama_adapter_lora_init(model.handle, str(file).encode())
    if not handle:
        raise ModelLoadError(
            f"llama.cpp could not load LoRA adapter {file}: its tensors do not fit {model.path}"
        )
    n_alora = llama_cpp.llama_adapter_get_alora_n_invocation_tokens(handle)
    tokens_ptr = llama_cpp.llama_adapter_get_alora_invocation_tokens(handle) if n_alora else None
    alora = tuple(int(tokens_ptr[i]) for i in range(n_alora)) if tokens_ptr else ()
    return LoraAdapter(
        id=ident,
        path=path,
        scale=scale,
        handle=handle,
        task_name=_meta(handle, "adapter.lora.task_name"),
        prompt_prefix=_meta(handle, "adapter.lora.prompt_prefix"),
        alora_invocation_tokens=alora,
    )


def _meta(handle: Any, key: str) -> str:
    buf = ctypes.create_string_buffer(1024)
    n = llama_cpp.llama_adapter_meta_val_str(handle, key.encode(), buf, len(buf))
    return buf.value.decode("utf-8", "replace") if n >= 0 else ""
