"""The distribution ships every package: server/, tui/ and converters/ map into llamactl.*."""

from __future__ import annotations

import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent


def declared() -> tuple[set[str], dict[str, str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return set(config["packages"]), config["package-dir"]


def test_every_package_directory_is_declared():
    packages, package_dir = declared()
    found = set()
    for name, folder in package_dir.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            found.add(".".join([name, *rel.parts]))
    missing = found - packages
    assert not missing, f"add these to [tool.setuptools] packages in pyproject.toml: {missing}"


def test_mapped_folders_follow_the_layout():
    _, package_dir = declared()
    assert package_dir["llamactl.server"] == "server"
    assert package_dir["llamactl.tui"] == "tui"
    assert package_dir["llamactl.converters"] == "converters"


def test_llama_cpp_python_is_pinned_exactly():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert "llama-cpp-python==0.3.36" in deps
