"""What the router's routes and middleware share: settings, keys and the model manager.

It stands where a single-model server keeps its ServerState, so the same GateMiddleware
(request ids, API keys) serves both: the router is always ready, and it has no engine of its
own (each child has one), which the shutdown path of `llamactl serve` checks for.
"""

from __future__ import annotations

import time

from llamactl.config import Settings

from .catalog import ModelSpec
from .command import child_settings
from .manager import ModelManager


class RouterState:
    ready = True
    load_error: str | None = None
    engine = None  # children own the engines; stopping them is the manager's job

    def __init__(self, settings: Settings, manager: ModelManager) -> None:
        self.settings = settings
        self.manager = manager
        self.api_keys: list[str] = settings.resolved_api_keys()
        self.started = time.time()

    def slots(self, spec: ModelSpec) -> int:
        """The model's --parallel: what its child was started with."""
        return int(child_settings(self.settings, spec)["parallel"])
