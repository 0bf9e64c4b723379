"""A per-tensor progress bar on stderr, shown only to a person at a terminal."""

from __future__ import annotations

import sys
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn


class TensorProgress:
    """`step(name, nbytes)` once per tensor written; a no-op when disabled or not a TTY."""

    def __init__(
        self, total_bytes: int, n_tensors: int, *, enabled: bool, console: Console | None = None
    ) -> None:
        self._progress: Progress | None = None
        self._n = n_tensors
        self._done = 0
        if not enabled:
            return
        console = console or Console(file=sys.stderr)
        if not console.is_terminal:
            return
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(binary_units=True),
            TimeRemainingColumn(),
            console=console,
            transient=True,
        )
        self._task = self._progress.add_task("", total=max(total_bytes, 1))

    @property
    def shown(self) -> bool:
        return self._progress is not None

    def __enter__(self) -> TensorProgress:
        if self._progress is not None:
            self._progress.start()
        return self

    def step(self, name: str, nbytes: int) -> None:
        self._done += 1
        if self._progress is not None:
            label = f"[{self._done}/{self._n}] {name}"
            self._progress.update(self._task, advance=nbytes, description=label)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._progress is not None:
            self._progress.stop()


def terminal_progress(total_bytes: int, n_tensors: int) -> TensorProgress:
    """A bar on stderr when it is a terminal: what front ends hand the engine to show the making
    of a decision model's trunk-only copy (the engine itself draws nothing)."""
    return TensorProgress(total_bytes, n_tensors, enabled=True)
