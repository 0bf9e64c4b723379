"""The RAM prompt cache kept on disk (`--cache-persist DIR`), so a restart does not forget it.

One file per saved sequence, in the state-file form (`state_file.py`), named
`<identity key>-<tokens hash>.llkv`: the key names the model file and KV layout, so several
models can share DIR, and the tokens hash makes a file's name say what it holds, so a sequence
already on disk is never written again. Reading trusts the header, not the name: a file for
other weights or another layout is ignored, a corrupt or truncated one is skipped with a
warning (so is anything else that is not a regular file: a FIFO is never opened to
block the start). Writing keeps what fits the cache's byte limit, newest first, and removes this
identity's files that are no longer in the cache (others' files are never touched).

Writes run off the decode thread: the engine hands over references to immutable state
buffers (cache entries) and fresh copies of idle slots' states, taken between decode steps.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import struct
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llamactl.core.errors import EngineClosedError, InvalidRequestError, LlamactlError

from .prompt_cache import CacheEntry, PromptCache
from .seq_store import SeqStore
from .slot import Slot
from .state_file import (
    SeqSnapshot,
    StateFileCorrupt,
    StateFileError,
    StateFileMismatch,
    StateIdentity,
    read_state_file,
    write_state_file,
)

__all__ = ["SUFFIX", "CachePersister", "PersistItem", "PersistedCache", "persist_items"]

log = logging.getLogger("llamactl.engine")

SUFFIX = ".llkv"


@dataclass
class PersistItem:
    """One sequence the cache holds now; `snap` is None when its file is already written."""

    name: str
    nbytes: int
    snap: SeqSnapshot | None


class CachePersister:
    """Reads and writes one identity's prompt-cache files in `directory`.

    Only one thread uses it at a time (the engine's persist thread, then its closer).
    """

    def __init__(self, directory: Path, identity: StateIdentity, limit: int | None) -> None:
        self.directory = directory
        self.identity = identity
        self.limit = limit  # bytes; None: no limit
        self.prefix = identity.key() + "-"
        self._written: dict[str, int] = {}  # this identity's sound files on disk -> state bytes

    def rekey(self, identity: StateIdentity) -> None:
        """Write under `identity` from now on (new LoRA scales); the old identity's files stay
        on disk for a start that matches them."""
        self.identity = identity
        self.prefix = identity.key() + "-"
        self._written = {}

    def name_for(self, tokens: list[int]) -> str:
        digest = hashlib.sha256(struct.pack(f"<{len(tokens)}i", *tokens)).hexdigest()[:32]
        return f"{self.prefix}{digest}{SUFFIX}"

    def on_disk(self, name: str) -> int | None:
        """The state bytes of `name` when it is written and sound, else None."""
        return self._written.get(name)

    def load(self) -> list[SeqSnapshot]:
        """Every sound file written for this identity, oldest first; others are skipped."""
        try:
            paths = [p for p in self.directory.iterdir() if p.name.endswith(SUFFIX)]
        except FileNotFoundError:
            return []
        except OSError as exc:
            log.warning("prompt cache: cannot read %s: %s", self.directory, exc)
            return []
        found: list[tuple[float, str, SeqSnapshot]] = []
        for path in paths:
            try:
                mtime = path.stat().st_mtime
                snap, _ = read_state_file(path, self.identity)
            except StateFileMismatch:
                log.debug("prompt cache: %s is for another model or layout; ignored", path.name)
                continue
            except (StateFileCorrupt, StateFileError, OSError) as exc:
                log.warning("prompt cache: skipped %s: %s", path, exc)
                continue
            except Exception as exc:  # one bad file never stops the server from starting
                log.warning("prompt cache: skipped %s: %s", path, str(exc) or repr(exc))
                continue
            if path.name != self.name_for(snap.tokens):
                log.warning("prompt cache: skipped %s: its name does not match its tokens", path)
                continue
            found.append((mtime, path.name, snap))
        found.sort(key=lambda f: f[0])
        for _, name, snap in found:
            self._written[name] = snap.nbytes
        if found:
            log.info("prompt cache: %d saved prompts read from %s", len(found), self.directory)
        return [snap for _, _, snap in found]

    def write(self, items: list[PersistItem]) -> int:
        """Make the directory hold `items` (newest first) up to the byte limit; return the
        files written. A file that cannot be written is skipped with a warning."""
        keep: set[str] = set()
        total = 0
        written = 0
        for item in items:
            if item.name in keep:
                continue
            if self.limit is not None and total + item.nbytes > self.limit:
                continue
            if item.name not in self._written:
                if item.snap is None:
                    continue
                try:
                    write_state_file(
                        self.directory / item.name, self.identity, item.snap, kind="cache"
                    )
                except OSError as exc:
                    log.warning("prompt cache: could not write %s: %s", item.name, exc)
                    continue
                self._written[item.name] = item.nbytes
                written += 1
            keep.add(item.name)
            total += item.nbytes
        for name in list(self._written):
            if name not in keep:
                del self._written[name]
                with contextlib.suppress(FileNotFoundError):
                    (self.directory / name).unlink()
        self._remove_stale(keep)
        return written

    def _remove_stale(self, keep: set[str]) -> None:
        """This identity's files that are neither kept nor sound (corrupt leftovers)."""
        try:
            names = [p.name for p in self.directory.iterdir()]
        except OSError:
            return
        for name in names:
            if name.startswith(self.prefix) and name.endswith(SUFFIX) and name not in keep:
                with contextlib.suppress(OSError):
                    (self.directory / name).unlink()


def persist_items(
    persister: CachePersister, cache: PromptCache, slots: list[Slot], store: SeqStore
) -> list[PersistItem]:
    """What the on-disk cache should hold, newest first: idle slots' finished prompts (copied
    now unless already on disk), then the RAM cache's entries (their buffers are never
    changed once made, so the writer may read them on another thread). Decode thread only."""
    items: list[PersistItem] = []
    for slot in sorted(slots, key=lambda s: -s.last_used):
        if slot.busy or not slot.saveable or not slot.kv_tokens:
            continue
        name = persister.name_for(slot.kv_tokens)
        size = persister.on_disk(name)
        if size is not None:
            items.append(PersistItem(name, size, None))
            continue
        try:
            snap = store.snapshot(slot)
        except LlamactlError:
            continue
        items.append(PersistItem(name, snap.nbytes, snap))
    for entry in reversed(cache.entries):
        if entry.layout != cache.layout:  # computed under other LoRA scales
            continue
        snap = SeqSnapshot(entry.tokens, entry.state, entry.checkpoints)
        items.append(PersistItem(persister.name_for(entry.tokens), snap.nbytes, snap))
    return items


# Runs `fn(None)` on the decode thread between two steps (Engine._on_decode_thread).
BetweenSteps = Callable[..., "Future[Any]"]


class PersistedCache:
    """The prompt cache's disk side for one engine: the saved prompts are loaded into the
    RAM cache at start, written every `interval` seconds by a thread of its own (the states
    taken between decode steps) and once more when the engine closes."""

    def __init__(
        self,
        directory: Path,
        identity: StateIdentity,
        cache: PromptCache,
        store: SeqStore,
        slots: list[Slot],
        between_steps: BetweenSteps,
    ) -> None:
        self._persister = CachePersister(directory, identity, cache.limit)
        self._cache, self._store, self._slots = cache, store, slots
        self._between_steps = between_steps
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        for snap in self._persister.load():
            try:
                store.check(snap)
            except InvalidRequestError as exc:
                log.warning("prompt cache: a saved prompt was skipped: %s", exc)
                continue
            cache.add(CacheEntry(snap.tokens, snap.state, cache.layout, snap.checkpoints))

    def start(self, interval: float) -> None:
        """Write every `interval` seconds from now on (0: only on close)."""
        if interval <= 0:
            return
        self._thread = threading.Thread(
            target=self._periodically, args=(interval,), name="llamactl-cache-persist"
        )
        self._thread.daemon = True
        self._thread.start()

    def write_now(self) -> int:
        """Write the cache and idle slots' prompts now; return the files written. Any thread
        but the decode thread (it waits for a gap between steps)."""
        items = self._between_steps(None, lambda _: self._items()).result()
        return self._persister.write(items)

    def stop(self) -> None:
        """End the periodic writes (the engine is closing)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def write_final(self) -> None:
        """The last write, once the decode thread has stopped (so this thread may read the
        context); a failure is logged, never raised: closing goes on."""
        try:
            self._persister.write(self._items())
        except Exception:
            log.warning("prompt cache: writing it to disk failed", exc_info=True)

    def rekey(self, identity: StateIdentity) -> None:
        self._persister.rekey(identity)

    def _items(self) -> list[PersistItem]:
        return persist_items(self._persister, self._cache, self._slots, self._store)

    def _periodically(self, interval: float) -> None:
        while not self._stop.wait(interval):
            try:
                self.write_now()
            except EngineClosedError:
                return
            except Exception:
                log.warning("prompt cache: writing it to disk failed", exc_info=True)
