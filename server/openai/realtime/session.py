"""What every realtime session kind implements, and the little of its socket it uses.

Sessions see their connection only as a `Socket` (send an event or a refusal, the app whose
state and services they use, close after what is queued), so they never import
`connection.py`: the connection drives sessions, sessions do not know how it frames events.
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar, Protocol

from fastapi import FastAPI

from llamactl.realtime.errors import ProtocolError
from llamactl.realtime.protocol import ServerEvent

__all__ = ["RealtimeSession", "Socket"]


class Socket(Protocol):
    """A session's side of its connection (`connection.Connection` is the one there is)."""

    @property
    def app(self) -> FastAPI:
        """The app: its `state.llamactl` and the speech services found through it."""

    def send(self, event: ServerEvent) -> None:
        """Queue a server event, in order (event-loop thread only)."""

    def send_error(self, exc: ProtocolError, event_id: str | None = None) -> None:
        """Queue the `error` event of a refusal."""

    def close_soon(self) -> None:
        """Close the socket after the events queued so far (a failed session)."""


class RealtimeSession(abc.ABC):
    """One `session.type` (transcription, realtime conversation) on one socket.

    Lifecycle: `start()` sets up whatever the session computes with and returns once it is
    live (the connection then sends `session.created`); `handle()` gets every client event
    but `session.update`, which goes to `update()`; `close()` frees everything at once.
    """

    kind: ClassVar[str]

    def __init__(self, conn: Socket) -> None:
        self.conn = conn
        self.live = False

    @abc.abstractmethod
    async def start(self) -> None: ...

    @abc.abstractmethod
    def session_object(self) -> dict[str, Any]:
        """The effective session, in the GA shape, for session.created/updated."""

    @abc.abstractmethod
    async def update(self, session: dict[str, Any]) -> None:
        """Apply a `session.update`; raise ProtocolError to refuse it unchanged."""

    @abc.abstractmethod
    async def handle(self, type_: str, event: dict[str, Any]) -> None: ...

    @abc.abstractmethod
    async def close(self) -> None: ...
