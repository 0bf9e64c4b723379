"""What code shared by the single-model server and the router reads of the app's state.

`ServerState` (one model, loaded in this process) and `RouterState` (many models, each in a
child process) both implement `AppState`: the request gate (loading, API keys), the
middleware built from the settings, and the graceful stop of `llamactl serve` read it and
nothing else, so neither needs to probe which kind of server it runs in.
"""

from __future__ import annotations

from typing import Protocol

from llamactl.config import Settings

__all__ = ["AppState"]


class AppState(Protocol):
    settings: Settings
    api_keys: list[str]
    draining: bool  # set by drain(): balancers' health checks see 503 from then on

    @property
    def ready(self) -> bool:
        """Requests can be served (503 `unavailable_error` until then)."""
        ...

    @property
    def load_error(self) -> str | None:
        """Why the model could not load; None while loading or once loaded."""
        ...

    @property
    def busy_slots(self) -> int:
        """Generations running in this process (a graceful stop waits for them)."""
        ...

    def drain(self) -> bool:
        """First step of a graceful stop: take no new work and end the queued requests.
        False when nothing here can finish gracefully (then `stop_generating` at once)."""
        ...

    def stop_generating(self) -> None:
        """End every open request with an error event (the last step of a stop)."""
        ...
