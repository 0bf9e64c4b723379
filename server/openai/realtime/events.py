"""Server events as the server builds them: plain dicts in the shapes of
`llamactl.realtime.protocol` (which tests check them against), serialized once when queued."""

from __future__ import annotations

from typing import Any

from llamactl.realtime.protocol import new_id

__all__ = ["event", "new_id"]


def event(type_: str, **fields: Any) -> dict[str, Any]:
    return {"type": type_, "event_id": new_id("event_"), **fields}
