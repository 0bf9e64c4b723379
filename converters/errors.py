"""Errors a conversion reports to people: always the file, and the field when there is one.

A checkpoint that is not what it claims fails before anything is written, with the exact file
and JSON field (or tensor) to look at, so the fix is obvious without a traceback.
"""

from __future__ import annotations

from pathlib import Path

from llamactl.engine.errors import LlamactlError


class ConvertError(LlamactlError):
    """A conversion that cannot go ahead (bad option, missing base model, unknown family)."""


class CheckpointError(ConvertError):
    """A checkpoint file contradicts what the conversion needs."""

    def __init__(self, path: Path | str, field: str | None, problem: str) -> None:
        self.path = Path(path)
        self.field = field
        self.problem = problem
        where = f"{self.path}: {field}" if field else str(self.path)
        super().__init__(f"{where}: {problem}")
