"""The installed llamactl's version: one lookup for `--version`, OpenAPI and `/props`."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

__all__ = ["DISTRIBUTION", "installed_version"]

DISTRIBUTION = "llamactl-cli"
"""The name on PyPI (`llamactl` there is an unrelated project); the command stays `llamactl`."""


def installed_version() -> str:
    """The version pip installed, or "0.0.0" when running from a source tree never installed."""
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "0.0.0"
