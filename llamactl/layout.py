"""Run from a checkout, `llamactl.server`, `llamactl.tui` and `llamactl.converters` are the
top-level folders server/, tui/ and converters/, as an install lays them out inside llamactl/.

`python -m llamactl` puts the current directory first on sys.path, so from the repository root
the checkout's `llamactl/` shadows the installed package, and it holds no server/. Rather than
move folders (the layout keeps five top-level parts) or lean on an editable install, a finder
maps the three names to their folders, read from the one place that declares them:
pyproject.toml's `[tool.setuptools] package-dir`. In an installed copy the folders are inside
the package and nothing is added.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from pathlib import Path

__all__ = ["entry_point", "install_checkout_finder"]

PACKAGE = Path(__file__).resolve().parent
ROOT = PACKAGE.parent


class CheckoutFinder(importlib.abc.MetaPathFinder):
    """Finds `llamactl.<part>` in `<checkout>/<folder>`; submodules follow the package path."""

    def __init__(self, folders: dict[str, Path]) -> None:
        self.folders = folders

    def find_spec(self, fullname, path=None, target=None) -> importlib.machinery.ModuleSpec | None:
        folder = self.folders.get(fullname)
        if folder is None:
            return None
        return importlib.util.spec_from_file_location(
            fullname, folder / "__init__.py", submodule_search_locations=[str(folder)]
        )


def mapped_folders(root: Path = ROOT) -> dict[str, Path]:
    """`llamactl.x` -> its folder, for the packages pyproject.toml maps outside llamactl/."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    pyproject = root / "pyproject.toml"
    try:
        config = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    package_dir = config.get("tool", {}).get("setuptools", {}).get("package-dir", {})
    return {
        name: root / folder
        for name, folder in package_dir.items()
        if name.startswith("llamactl.") and (root / folder / "__init__.py").is_file()
    }


def install_checkout_finder() -> None:
    """Add the finder when this `llamactl/` is a checkout's (its parts live beside it)."""
    if (PACKAGE / "server").is_dir() or any(isinstance(f, CheckoutFinder) for f in sys.meta_path):
        return  # an installed copy, or already done
    folders = mapped_folders()
    if folders:
        sys.meta_path.insert(0, CheckoutFinder(folders))


def entry_point() -> list[str]:
    """The command that runs the installed `llamactl`: its console script beside this
    interpreter, or `python -m llamactl` where there is none (a venv-less checkout). Tools that
    spawn a server use it, so the child runs the installed code whatever its cwd."""
    script = Path(sys.executable).with_name("llamactl")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "llamactl"]
