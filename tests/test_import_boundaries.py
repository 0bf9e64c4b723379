"""The packages' import boundaries (docs/engine.md, Layout): which package may import which.

Read from the source with `ast`, so imports inside functions count too: the engine must not
reach the converters, the config, rich or a front end; the core imports nothing of llamactl
above it; the converters stay below the engine and the config. A subprocess checks that the
public faces are lazy: `import llamactl` loads neither llama.cpp nor numpy.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# folder -> the import name its modules have
PACKAGES = {
    "llamactl/core": "llamactl.core",
    "llamactl/engine": "llamactl.engine",
    "llamactl/devices": "llamactl.devices",
    "converters": "llamactl.converters",
}

FORBIDDEN = {
    "llamactl.core": (
        "llamactl.engine",
        "llamactl.converters",
        "llamactl.config",
        "llamactl.devices",
        "llamactl.cli",
        "llamactl.server",
        "llamactl.tui",
        "rich",
        "llama_cpp",
    ),
    "llamactl.engine": (
        "llamactl.converters",
        "llamactl.config",
        "llamactl.models",
        "llamactl.devices",
        "llamactl.cli",
        "llamactl.server",
        "llamactl.tui",
        "rich",
        "sounddevice",
    ),
    "llamactl.devices": ("llamactl.engine", "llamactl.cli", "llamactl.server", "llamactl.tui"),
    "llamactl.converters": (
        "llamactl.engine",
        "llamactl.config",
        "llamactl.cli",
        "llamactl.server",
        "llamactl.tui",
    ),
}


def _module_name(path: Path, folder: str, package: str) -> str:
    rel = path.relative_to(ROOT / folder).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"]
    return ".".join([package, *parts])


def _imports(path: Path, module: str) -> set[str]:
    """Every module `path` imports, relative imports resolved."""
    is_package = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            out.add(name)
            out.update(f"{name}.{alias.name}" for alias in node.names)
    return out


def _violations(package: str) -> list[str]:
    folder = next(f for f, p in PACKAGES.items() if p == package)
    found = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        module = _module_name(path, folder, package)
        for name in _imports(path, module):
            for banned in FORBIDDEN[package]:
                if name == banned or name.startswith(banned + "."):
                    found.append(f"{path.relative_to(ROOT)} imports {name}")
    return sorted(set(found))


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_stay_within_bounds(package: str) -> None:
    assert _violations(package) == []


def test_the_checker_sees_relative_and_late_imports(tmp_path: Path) -> None:
    source = tmp_path / "mod.py"
    source.write_text("from ..config import x\ndef f():\n    import rich.progress\n")
    names = _imports(source, "llamactl.engine.mod")
    assert "llamactl.config" in names and "rich.progress" in names


def test_the_public_faces_are_lazy() -> None:
    """`import llamactl` (and its engine face) must stay cheap: the CLI's --help pays for it."""
    code = (
        "import sys, llamactl, llamactl.engine\n"
        "heavy = [m for m in ('llama_cpp', 'numpy', 'rich', 'fastapi') if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == ""


def test_the_faces_export_what_they_name() -> None:
    code = (
        "import llamactl, llamactl.engine\n"
        "for face in (llamactl, llamactl.engine):\n"
        "    for name in face.__all__:\n"
        "        getattr(face, name)\n"
        "print(len(llamactl.__all__))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert int(out.stdout) > 30


def _type_checking_names(path: Path) -> set[str]:
    """The names a face imports under `if TYPE_CHECKING:` (what type checkers see)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for imp in node.body:
                if isinstance(imp, ast.ImportFrom):
                    names.update(a.name for a in imp.names if a.name != "*")
    return names


def test_the_engine_face_shows_type_checkers_what_it_exports() -> None:
    import llamactl.engine

    assert _type_checking_names(ROOT / "llamactl/engine/__init__.py") == set(
        llamactl.engine.__all__
    )


def test_front_ends_import_the_engine_through_its_face() -> None:
    """server/, tui/ and the CLI name `llamactl` (or `llamactl.engine`), not engine modules."""
    found = []
    for folder, package in (("server", "llamactl.server"), ("tui", "llamactl.tui")):
        for path in sorted((ROOT / folder).rglob("*.py")):
            module = _module_name(path, folder, package)
            found += [f"{path.name}: {n}" for n in _imports(path, module) if _internal(n)]
    for path in sorted((ROOT / "llamactl/cli").rglob("*.py")):
        module = _module_name(path, "llamactl/cli", "llamactl.cli")
        found += [f"{path.name}: {n}" for n in _imports(path, module) if _internal(n)]
    assert found == []


def _internal(name: str) -> bool:
    return name.startswith(("llamactl.engine.", "llamactl.core.")) and not name.startswith(
        "llamactl.engine.__"
    )


# The top-level parts of the project: llamactl's sub-packages and modules, and the three
# folders installed under it. `llamactl` itself (the face) is left out: it names the engine
# and the core lazily for the front ends.
FOLDERS = {"llamactl": "llamactl", "server": "llamactl.server", "tui": "llamactl.tui"}
FOLDERS["converters"] = "llamactl.converters"


def _part(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def _part_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            module = _module_name(path, folder, package)
            here = _part(module)
            for name in _imports(path, module):
                there = _part(name) if name.startswith("llamactl.") else None
                if here and there and there != here:
                    graph.setdefault(here, set()).add(there)
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of `graph` (as a path that returns to its start), or []."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        path.pop()
        return []

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return []


def test_the_cycle_finder_finds_cycles() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}}) == []


def test_no_import_cycle_between_the_parts() -> None:
    """engine, core, config, converters, devices, realtime, cli, server, tui...: one way."""
    graph = _part_graph()
    assert {"engine", "config", "converters", "server"} <= graph.keys()
    assert _cycle(graph) == []


def _module_graph(folder: Path, package: str) -> dict[str, set[str]]:
    """Module -> the modules of the same package (`folder`, imported as `package`) it
    imports, named relative to it; imports under `if TYPE_CHECKING:` and inside functions
    count like the others (`_imports` reads them all)."""
    modules: dict[str, Path] = {}
    for path in sorted(folder.rglob("*.py")):
        parts = [p for p in path.relative_to(folder).with_suffix("").parts if p != "__init__"]
        modules[".".join([package, *parts])] = path

    def owner(name: str) -> str | None:  # the package's module that `name` is, or is in
        found = [m for m in modules if name == m or name.startswith(m + ".")]
        return max(found, key=len) if found else None

    def short(module: str) -> str:
        return module.removeprefix(package).lstrip(".") or "__init__"

    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        for name in _imports(path, module):
            there = owner(name)
            if there is not None and there != module:
                graph.setdefault(short(module), set()).add(short(there))
    return graph


def test_the_module_graph_sees_type_checking_and_late_imports(tmp_path: Path) -> None:
    (tmp_path / "__init__.py").write_text("")
    (tmp_path / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\n"
    )
    (tmp_path / "b.py").write_text("def f():\n    from . import a\n")
    assert _cycle(_module_graph(tmp_path, "pkg")) == ["a", "b", "a"]


def test_the_realtime_server_package_has_no_import_cycle() -> None:
    """Sessions see their connection through a Protocol (`session.Socket`) and `kinds.py`
    names the session kinds, so connection, sessions, items and responses import one way."""
    graph = _module_graph(ROOT / "server/openai/realtime", "llamactl.server.openai.realtime")
    assert {"connection", "conversation", "transcription", "routes"} <= graph.keys()
    assert _cycle(graph) == []


# server/'s API families (a package each) and its shared modules (the rest of the top level)
FAMILIES = ("openai", "anthropic", "llamacpp", "system", "router")


def test_the_server_state_imports_no_api_family() -> None:
    """Families build on the shared modules (state, loader, errors, limits, sse...), never the
    other way; only `app.py`, which assembles the app, names them."""
    found = []
    for path in sorted((ROOT / "server").glob("*.py")):
        if path.name == "app.py":
            continue
        module = _module_name(path, "server", "llamactl.server")
        for name in _imports(path, module):
            if name.startswith("llamactl.server.") and name.split(".")[2] in FAMILIES:
                found.append(f"{path.name} imports {name}")
    assert found == []


def test_the_chat_engine_stands_below_the_decision_and_audio_engines() -> None:
    """engine/'s own modules and engine/chat/ (what the chat engine is made of) never import
    engine/decision/ or engine/audio/: those build on them (the mmproj is opened in
    engine/projector.py for all three). Only the engine's face names them."""
    found = []
    paths = [*sorted((ROOT / "llamactl/engine").glob("*.py"))]
    paths += sorted((ROOT / "llamactl/engine/chat").rglob("*.py"))
    for path in paths:
        if path == ROOT / "llamactl/engine/__init__.py":
            continue
        module = _module_name(path, "llamactl", "llamactl")
        for name in _imports(path, module):
            if name.startswith(("llamactl.engine.decision", "llamactl.engine.audio")):
                found.append(f"{path.relative_to(ROOT)} imports {name}")
    assert found == []
