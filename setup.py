"""Build step of llamactl's install: Smart Turn's ONNX file is taken out of the pipecat-ai
wheel on PyPI into the package, so semantic turn detection works after `pip install` with no
further step (docs/api-realtime.md, Semantic turn detection). Everything else is in
pyproject.toml. Offline, the install goes on without it and says how to get it later."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


def _source():
    path = HERE / "llamactl" / "engine" / "audio" / "smart_turn_source.py"
    spec = importlib.util.spec_from_file_location("_smart_turn_source", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildWithSmartTurn(build_py):
    def run(self) -> None:
        source = _source()
        if not source.PACKAGED.is_file():
            try:
                source.fetch_from_pypi(source.PACKAGED)
            except (OSError, ValueError, KeyError) as exc:
                print(
                    f"llamactl: Smart Turn ({source.SMART_TURN_FILE}) not fetched ({exc}); "
                    "semantic turn detection will say how to get it",
                    file=sys.stderr,
                )
        super().run()


setup(cmdclass={"build_py": BuildWithSmartTurn})
