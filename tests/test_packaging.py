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


def test_a_checkout_finds_its_parts_in_the_top_level_folders():
    """From the repository root, `python -m llamactl` imports the checkout's llamactl/ (the
    current directory comes first on sys.path) even when another copy is installed: its
    server/, tui/ and converters/ must then come from the same checkout. -S: no site-packages,
    no editable-install finder; only llamactl/layout.py can find them."""
    import subprocess

    code = (
        "from importlib.util import find_spec as f;"
        "[print(f(n).origin) for n in ('llamactl.server', 'llamactl.converters', "
        "'llamactl.server.router')]"
    )
    out = subprocess.run(
        [sys.executable, "-S", "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == [
        str(ROOT / "server" / "__init__.py"),
        str(ROOT / "converters" / "__init__.py"),
        str(ROOT / "server" / "router" / "__init__.py"),
    ]


def test_the_checkout_finder_reads_the_package_dir_map():
    from llamactl.layout import mapped_folders

    _, package_dir = declared()
    expected = {name: ROOT / folder for name, folder in package_dir.items() if name != "llamactl"}
    assert mapped_folders(ROOT) == expected
