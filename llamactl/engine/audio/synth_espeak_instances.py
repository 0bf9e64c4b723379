"""Fresh eSpeak NG instances, one per synthesis: the same text, voice and speed give the same
samples, and syntheses run side by side.

libespeak-ng keeps synthesis state in static variables that survive from one utterance to the
next, and `espeak_Terminate` / `espeak_Initialize` do not reset them: one sentence spoken
three times in one process came out 49,208, 49,215 and 49,209 samples long, with different
waveforms (its `espeak_ng_SetRandSeed` does not change that). A library loaded afresh starts
from its initial state, so each synthesis loads a private copy of the library, initialises it,
speaks, and unloads it again (1-5 ms here). The dynamic loader hands out one instance per file,
so each copy is its own file, and copies in use are never shared: concurrent requests each
get their own instance instead of queueing on one process-wide engine.
"""

from __future__ import annotations

import _ctypes
import atexit
import contextlib
import ctypes
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from llamactl.core.errors import SynthesisError

from .synth_espeak_lib import load_library

__all__ = ["InstancePool"]


class InstancePool:
    """Private copies of libespeak-ng, each loaded for one synthesis at a time."""

    def __init__(
        self, library: Path, data_parent: Path, *, output_mode: int, buffer_ms: int, size: int = 8
    ) -> None:
        self._library = library
        self._data = str(data_parent).encode()
        self._output_mode = output_mode
        self._buffer_ms = buffer_ms
        self._size = size
        self._free: list[Path] = []
        self._made = 0
        self._cv = threading.Condition()
        self._dir: Path | None = None

    @contextlib.contextmanager
    def instance(self) -> Iterator[ctypes.CDLL]:
        """A freshly initialised eSpeak NG, unloaded when the block ends."""
        path = self._take()
        try:
            lib = load_library(str(path))
            try:
                if lib.espeak_Initialize(self._output_mode, self._buffer_ms, self._data, 0) <= 0:
                    raise SynthesisError(f"eSpeak NG did not initialise (data in {self._data!r})")
                try:
                    yield lib
                finally:
                    lib.espeak_Terminate()
            finally:
                _unload(lib)
        finally:
            self._give(path)

    def _take(self) -> Path:
        with self._cv:
            while not self._free and self._made >= self._size:
                self._cv.wait()
            if self._free:
                return self._free.pop()
            self._made += 1
            n = self._made
        try:
            return self._copy(n)
        except OSError as exc:
            with self._cv:
                self._made -= 1
                self._cv.notify()
            raise SynthesisError(f"cannot copy eSpeak NG's library: {exc}") from None

    def _give(self, path: Path) -> None:
        with self._cv:
            self._free.append(path)
            self._cv.notify()

    def _copy(self, n: int) -> Path:
        with self._cv:
            if self._dir is None:
                self._dir = Path(tempfile.mkdtemp(prefix="llamactl-espeak-"))
                atexit.register(shutil.rmtree, self._dir, True)
            folder = self._dir
        target = folder / f"{n}-{self._library.name}"
        shutil.copyfile(self._library, target)
        return target


def _unload(lib: ctypes.CDLL) -> None:
    """dlclose: the next load of the same file starts from the library's initial state."""
    close = getattr(_ctypes, "dlclose", None) or getattr(_ctypes, "FreeLibrary", None)
    if close is not None:
        close(lib._handle)
