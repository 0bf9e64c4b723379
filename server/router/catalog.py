"""The models a router serves: the preset's named models, then the GGUF files of --models-dir.

Built once at start. A model whose file cannot be found or read is still listed, with its
error, so `/models` explains why it fails instead of silently hiding it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llamactl.config import Settings
from llamactl.engine.errors import ConfigError, LlamactlError
from llamactl.engine.gguf_info import read_gguf_info
from llamactl.models import list_models, resolve_model

from .preset import PresetModel, read_preset

# GGUF capabilities that make a file servable on its own (projectors are not)
_SERVABLE = frozenset({"chat", "embed", "rerank", "decide"})


@dataclass(frozen=True)
class ModelSpec:
    """One servable model and what its child is started with."""

    name: str
    path: Path | None
    source: str  # "preset" or "models-dir"
    aliases: tuple[str, ...] = ()
    settings: dict[str, Any] = field(default_factory=dict)  # over the router's settings
    extra: dict[str, str] = field(default_factory=dict)  # pass-through keys (draft_model...)
    error: str | None = None
    architecture: str | None = None
    context_length: int | None = None
    size_bytes: int | None = None
    capabilities: tuple[str, ...] = ()
    projector_capabilities: tuple[str, ...] = ()  # of the mmproj file: "see", "hear"

    @property
    def input_modalities(self) -> list[str]:
        found = ["text"] if "chat" in self.capabilities else []
        if "see" in self.projector_capabilities:
            found.append("image")
        if "hear" in self.projector_capabilities:
            found.append("audio")
        return found

    @property
    def output_modalities(self) -> list[str]:
        if "decide" in self.capabilities:
            return ["decisions"]
        return ["text"] if "chat" in self.capabilities else []


class Catalog:
    """Names and aliases to specs; a name is never shadowed silently."""

    def __init__(self, specs: list[ModelSpec]) -> None:
        self._specs: dict[str, ModelSpec] = {}
        self._names: dict[str, str] = {}
        for spec in specs:
            for name in (spec.name, *spec.aliases):
                if name in self._names:
                    raise ConfigError(
                        f"model name {name!r} is used by both {self._names[name]!r} and "
                        f"{spec.name!r}; rename one"
                    )
                self._names[name] = spec.name
            self._specs[spec.name] = spec

    def resolve(self, name: str) -> ModelSpec | None:
        """The spec for a model name or alias."""
        canonical = self._names.get(name)
        return self._specs[canonical] if canonical is not None else None

    def __iter__(self) -> Iterator[ModelSpec]:
        return iter(self._specs.values())

    def __len__(self) -> int:
        return len(self._specs)


def build_catalog(settings: Settings, models_dir: Path | None) -> Catalog:
    """Preset models first (their names win), then every model file in `models_dir`."""
    specs: list[ModelSpec] = []
    taken: set[str] = set()
    if settings.models_preset is not None:
        for preset in read_preset(Path(settings.models_preset)):
            specs.append(_from_preset(preset, settings))
            taken.update((preset.name, *preset.aliases))
    if models_dir is not None:
        if not models_dir.is_dir():
            raise ConfigError(f"--models-dir {models_dir} is not a directory")
        scan = dataclasses.replace(settings, models_dir=models_dir, aliases={})
        for entry in list_models(scan):
            if entry.source != "models-dir" or entry.name in taken:
                continue
            if entry.error is None and not _SERVABLE & set(entry.capabilities):
                continue  # a projector or vocab-only file
            specs.append(
                ModelSpec(
                    name=entry.name,
                    path=entry.path,
                    source="models-dir",
                    error=entry.error,
                    architecture=entry.architecture,
                    context_length=entry.context_length,
                    size_bytes=entry.size_bytes,
                    capabilities=entry.capabilities,
                )
            )
    return Catalog(specs)


def _from_preset(preset: PresetModel, settings: Settings) -> ModelSpec:
    base = ModelSpec(
        name=preset.name,
        path=None,
        source="preset",
        aliases=preset.aliases,
        settings=preset.settings,
        extra=preset.extra,
    )
    try:
        path = resolve_model(settings, preset.model).path.absolute()
        info = read_gguf_info(path)
    except LlamactlError as e:
        return dataclasses.replace(base, error=str(e).splitlines()[0])
    projector: tuple[str, ...] = ()
    if "mmproj" in preset.extra:
        try:
            projector = read_gguf_info(preset.extra["mmproj"]).capabilities
        except LlamactlError:
            projector = ()  # the child reports it when it loads
    return dataclasses.replace(
        base,
        path=path,
        architecture=info.architecture,
        context_length=info.context_length,
        size_bytes=info.size_bytes,
        capabilities=info.capabilities,
        projector_capabilities=projector,
    )
