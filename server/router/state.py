"""What the router's routes and middleware share: settings, keys and the model manager.

It is the router's `AppState`, as ServerState is a single-model server's, so the same
GateMiddleware (request ids, API keys) and the same graceful stop serve both: the router is
always ready, and it generates nothing itself (each child has its engine, stopping the
children is the manager's job).
"""

from __future__ import annotations

import time

from llamactl.config import Settings

from .catalog import ModelSpec
from .command import child_settings
from .manager import ModelManager

__all__ = ["RouterState"]


class RouterState:
    ready = True
    load_error: str | None = None
    busy_slots = 0  # no generation runs in the router's own process

    def __init__(self, settings: Settings, manager: ModelManager) -> None:
        self.settings = settings
        self.manager = manager
        self.api_keys: list[str] = settings.resolved_api_keys()
        self.started = time.time()
        self.draining = False

    def slots(self, spec: ModelSpec) -> int:
        """The model's --parallel: what its child was started with."""
        return int(child_settings(self.settings, spec)["parallel"])

    def drain(self) -> bool:
        self.draining = True
        return False  # nothing to wait for here: the manager stops the children

    def stop_generating(self) -> None:
        """Nothing generates in the router's process."""
