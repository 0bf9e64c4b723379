"""The turn-taking choices `transcribe` and `tui` share: how a spoken turn ends.

The names are `llamactl.realtime.client.TURN_MODES` (kept here as enums so `--help` needs
no pydantic import); the eagerness levels are OpenAI's, timed in the speech engine.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["EAGERNESS_HELP", "TURN_HELP", "Eagerness", "TurnMode"]


class TurnMode(str, Enum):
    server = "server"
    semantic = "semantic"
    manual = "manual"


class Eagerness(str, Enum):
    low = "low"
    medium = "medium"
    high = "high"
    auto = "auto"


TURN_HELP = (
    "How a turn ends: server (voice activity: 500 ms of silence), semantic (Smart Turn "
    "judges the speaker finished: ~200 ms after a finished sentence, longer after an "
    "unfinished one), manual ({manual})."
)
EAGERNESS_HELP = (
    "For --turn semantic: how soon a turn ends; low waits up to 8 s for an unfinished "
    "sentence, medium (= auto) 4 s, high 2 s."
)
