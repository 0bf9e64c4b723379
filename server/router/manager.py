"""Which models are loaded: load on demand, at most `max_loaded`, LRU and idle unloading.

Everything runs on the router's event loop, so plain attributes are the state and no locks
are needed except around admission (deciding that a load may take a place). A model with
requests in flight is never evicted to make room: the load waits for one to finish.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from llamactl import ChildFailedError

from ..errors import APIError
from .catalog import Catalog, ModelSpec
from .child import ChildProcess

log = logging.getLogger("llamactl.router")

# Builds (but does not start) the child for a spec: the app binds settings and the launcher.
ChildFactory = Callable[[ModelSpec], ChildProcess]


class Status(str, enum.Enum):
    UNLOADED = "unloaded"
    LOADING = "loading"
    LOADED = "loaded"
    FAILED = "failed"


@dataclass
class ModelState:
    spec: ModelSpec
    status: Status = Status.UNLOADED
    child: ChildProcess | None = None
    message: str | None = None  # why it failed
    exit_code: int | None = None
    in_flight: int = 0
    waiting: int = 0  # requests waiting for it to load: it must not be evicted meanwhile
    last_used: float = 0.0  # monotonic
    loaded_at: float | None = None  # wall clock
    load_seconds: float | None = None
    admitted: bool = False  # holds one of the max_loaded places while loading
    load_task: asyncio.Task[None] | None = field(default=None, repr=False)

    @property
    def occupies(self) -> bool:
        return self.status is Status.LOADED or (self.status is Status.LOADING and self.admitted)


class ModelManager:
    def __init__(
        self,
        catalog: Catalog,
        make_child: ChildFactory,
        *,
        max_loaded: int = 4,
        idle_seconds: float = -1.0,
        load_timeout: float = 300.0,
    ) -> None:
        self.catalog = catalog
        self.states = {spec.name: ModelState(spec) for spec in catalog}
        self._make_child = make_child
        self.max_loaded = max_loaded
        self.idle_seconds = idle_seconds
        self.load_timeout = load_timeout
        self._client = httpx.AsyncClient(trust_env=False)  # health checks only
        self._admit = asyncio.Lock()
        self._changed = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._stopping: set[ChildProcess] = set()  # unloads in progress, awaited by close()
        self._idle_task: asyncio.Task[None] | None = None
        # called when a child stops or dies (the proxy drops its connections to it)
        self.on_child_gone: Callable[[ChildProcess], None] = lambda child: None

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        if self.idle_seconds >= 0:
            self._idle_task = asyncio.create_task(self._unload_idle())

    async def close(self) -> None:
        """Stop every child (router shutdown)."""
        if self._idle_task is not None:
            self._idle_task.cancel()
        for state in self.states.values():
            if state.load_task is not None and not state.load_task.done():
                state.load_task.cancel()
        children = [s.child for s in self.states.values() if s.child is not None]
        children += self._stopping
        await asyncio.gather(*(c.stop() for c in children), return_exceptions=True)
        for task in list(self._tasks):
            task.cancel()
        await self._client.aclose()

    # ------------------------------------------------------------------ requests
    def lookup(self, name: str) -> ModelState:
        spec = self.catalog.resolve(name)
        if spec is None:
            raise APIError(400, f"model '{name}' not found")
        return self.states[spec.name]

    async def acquire(self, name: str, *, autoload: bool) -> ModelState:
        """The model's state with a live child, counted as in use until `release`."""
        state = self.lookup(name)
        deadline = time.monotonic() + self.load_timeout
        while True:
            if state.status is Status.LOADED and state.child is not None and state.child.alive:
                state.in_flight += 1
                state.last_used = time.monotonic()
                return state
            if state.status is not Status.LOADING and not autoload:
                raise APIError(400, "model is not loaded")
            state.waiting += 1
            try:
                await self._wait_loaded(state, deadline)
            finally:
                state.waiting -= 1

    def release(self, state: ModelState) -> None:
        state.in_flight -= 1
        state.last_used = time.monotonic()
        if state.in_flight == 0:
            self._notify()

    def child_died(self, state: ModelState, child: ChildProcess) -> None:
        """A proxy saw the child's connection refused: record it before its watcher does."""
        if state.child is child and not child.alive:
            self._mark_exited(state, child)

    # ------------------------------------------------------------------ load / unload
    async def load(self, name: str) -> ModelState:
        state = self.lookup(name)
        if state.status is not Status.LOADED:
            await self._wait_loaded(state, time.monotonic() + self.load_timeout)
        return state

    async def unload(self, name: str) -> ModelState:
        state = self.lookup(name)
        if state.status is Status.LOADING and state.load_task is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(state.load_task)
        if state.status is not Status.LOADED:
            raise APIError(400, "model is not loaded")
        await self._stop(state, "unloaded on request")
        return state

    async def _wait_loaded(self, state: ModelState, deadline: float) -> None:
        if state.load_task is None or state.load_task.done():
            state.load_task = asyncio.create_task(self._load(state))
        remaining = deadline - time.monotonic()
        try:
            await asyncio.wait_for(asyncio.shield(state.load_task), max(remaining, 0.001))
        except asyncio.TimeoutError:
            raise APIError(
                503, f"model '{state.spec.name}' is still loading; try again later"
            ) from None
        if state.status is not Status.LOADED:
            raise APIError(500, f"model '{state.spec.name}' failed to load: {state.message}")

    async def _load(self, state: ModelState) -> None:
        spec = state.spec
        state.status, state.message, state.exit_code = Status.LOADING, None, None
        t0 = time.monotonic()
        try:
            if spec.error is not None or spec.path is None:
                raise ChildFailedError(spec.error or "no model file")
            await self._admit_one(state, t0 + self.load_timeout)
            child = self._make_child(spec)
            log.info("loading %s on port %d", spec.name, child.port)
            try:
                await child.start(self._client, self.load_timeout)
            except BaseException:
                await child.stop()
                raise
        except Exception as e:  # ChildFailedError, or the launcher itself could not start
            message = str(e) if isinstance(e, ChildFailedError) else f"{type(e).__name__}: {e}"
            state.status, state.message, state.admitted = Status.FAILED, message, False
            log.warning("model %s failed to load: %s", spec.name, message)
            self._notify()
            return
        except BaseException:
            state.status, state.admitted = Status.UNLOADED, False
            self._notify()
            raise
        state.child, state.status, state.admitted = child, Status.LOADED, False
        state.loaded_at, state.last_used = time.time(), time.monotonic()
        state.load_seconds = time.monotonic() - t0
        log.info("model %s loaded in %.2f s", spec.name, state.load_seconds)
        self._spawn(self._watch(state, child))
        self._notify()

    async def _admit_one(self, state: ModelState, deadline: float) -> None:
        """Take a place among `max_loaded`, unloading the least recently used idle model;
        wait while every place is busy."""
        while True:
            async with self._admit:
                others = [s for s in self.states.values() if s is not state and s.occupies]
                if self.max_loaded <= 0 or len(others) < self.max_loaded:
                    state.admitted = True
                    return
                idle = [
                    s
                    for s in others
                    if s.status is Status.LOADED and s.in_flight == 0 and s.waiting == 0
                ]
                if idle:
                    victim = min(idle, key=lambda s: s.last_used)
                    await self._stop(victim, f"unloaded to make room for {state.spec.name}")
                    continue
                changed = self._changed
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ChildFailedError(f"no room: all {self.max_loaded} loaded models are busy")
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(changed.wait(), remaining)

    async def _stop(self, state: ModelState, reason: str) -> None:
        child = state.child
        state.status, state.child, state.message = Status.UNLOADED, None, None
        state.loaded_at = None
        log.info("model %s %s", state.spec.name, reason)
        if child is not None:
            self.on_child_gone(child)
            self._stopping.add(child)
            try:
                await child.stop()
            finally:
                self._stopping.discard(child)
        self._notify()

    async def _watch(self, state: ModelState, child: ChildProcess) -> None:
        """Report a child that dies on its own (crash, OOM kill) as failed."""
        await child.wait()
        if not child.stopping and state.child is child:
            self._mark_exited(state, child)

    def _mark_exited(self, state: ModelState, child: ChildProcess) -> None:
        state.status, state.child = Status.FAILED, None
        state.exit_code = child.proc.returncode if child.proc else None
        state.message = f"process {child.exit_message()}"
        state.loaded_at = None
        self.on_child_gone(child)
        log.warning("model %s: %s", state.spec.name, state.message)
        self._notify()

    async def _unload_idle(self) -> None:
        period = min(max(self.idle_seconds / 4, 0.05), 1.0)
        while True:
            await asyncio.sleep(period)
            now = time.monotonic()
            for state in list(self.states.values()):
                if (
                    state.status is Status.LOADED
                    and state.in_flight == 0
                    and state.waiting == 0
                    and now - state.last_used >= self.idle_seconds
                ):
                    await self._stop(state, f"unloaded after {self.idle_seconds:g} s idle")

    # ------------------------------------------------------------------ helpers
    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def _spawn(self, coro) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
