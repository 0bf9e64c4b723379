"""The models a router serves: the preset's named models, then the GGUF files of --models-dir.

Built once at start. A model whose file cannot be found or read is still listed, with its
error, so `/models` explains why it fails instead of silently hiding it.

Projectors in --models-dir are paired with their models as llama-server's router does: a
model with its `mmproj*.gguf` in a subdirectory of its own (the subdirectory's name is then an
alias of the model), or `mmproj-<model file name>` beside it in any directory.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llamactl import ConfigError, LlamactlError, read_gguf_info
from llamactl.config import Settings
from llamactl.models import SERVABLE, ModelEntry, is_projector, list_models, resolve_model

from ..capabilities import input_modalities, output_modalities, served_capabilities
from .preset import PresetModel, read_preset

# GGUF capabilities that make a file servable on its own (projectors are not)


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
        return input_modalities(self.capabilities, self.projector_capabilities)

    @property
    def output_modalities(self) -> list[str]:
        return output_modalities(self.capabilities)

    @property
    def serves(self) -> list[str]:
        return served_capabilities(self.capabilities, self.projector_capabilities)


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
        entries = [e for e in list_models(scan) if e.source == "models-dir"]
        projectors = pair_projectors(entries)
        dir_aliases = subdirectory_aliases(entries)
        for entry in entries:
            if entry.name in taken or is_projector(entry):
                continue
            if entry.error is None and not SERVABLE & set(entry.capabilities):
                continue  # a vocab-only file
            spec = ModelSpec(
                name=entry.name,
                path=entry.path,
                source="models-dir",
                error=entry.error,
                architecture=entry.architecture,
                context_length=entry.context_length,
                size_bytes=entry.size_bytes,
                capabilities=entry.capabilities,
            )
            proj = projectors.get(entry.name)
            if proj is not None:
                spec = dataclasses.replace(
                    spec,
                    extra={"mmproj": str(proj.path)},
                    projector_capabilities=proj.capabilities,
                )
            specs.append(spec)
        names = {n for spec in specs for n in (spec.name, *spec.aliases)}
        for i, spec in enumerate(specs):
            alias = dir_aliases.get(spec.name)
            if spec.source == "models-dir" and alias and alias not in names:
                specs[i] = dataclasses.replace(spec, aliases=(alias,))
                names.add(alias)
    return Catalog(specs)


def pair_projectors(entries: list[ModelEntry]) -> dict[str, ModelEntry]:
    """Model name -> its projector, per directory: `mmproj-<model file>` first, then the one
    projector of a directory that holds one model. Anything else stays unpaired."""
    by_dir: dict[Path, tuple[list[ModelEntry], list[ModelEntry]]] = {}
    for entry in entries:
        models, projs = by_dir.setdefault(entry.path.parent, ([], []))
        (projs if is_projector(entry) else models).append(entry)
    pairs: dict[str, ModelEntry] = {}
    for models, projs in by_dir.values():
        left = list(projs)
        for model in models:
            stem = Path(model.name).name.lower()  # a split model's name has no shard suffix
            match = next((p for p in left if p.path.stem.lower() == f"mmproj-{stem}"), None)
            if match is not None:
                pairs[model.name] = match
                left.remove(match)
        unpaired = [m for m in models if m.name not in pairs]
        if len(unpaired) == 1 and len(left) == 1:
            pairs[unpaired[0].name] = left[0]
    return pairs


def subdirectory_aliases(entries: list[ModelEntry]) -> dict[str, str]:
    """A model alone in its subdirectory (llama-server's layout for a model with its
    projector, or a split model) is also known by the subdirectory's path."""
    by_dir: dict[str, list[str]] = {}
    for entry in entries:
        if not is_projector(entry) and "/" in entry.name:
            by_dir.setdefault(entry.name.rsplit("/", 1)[0], []).append(entry.name)
    return {names[0]: d for d, names in by_dir.items() if len(names) == 1}


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
