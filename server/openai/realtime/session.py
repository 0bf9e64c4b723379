"""What every realtime session kind implements; the connection drives it."""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from .connection import Connection


class RealtimeSession(abc.ABC):
    """One `session.type` (transcription, realtime conversation) on one socket.

    Lifecycle: `start()` sets up whatever the session computes with and returns once it is
    live (the connection then sends `session.created`); `handle()` gets every client event
    but `session.update`, which goes to `update()`; `close()` frees everything at once.
    """

    kind: ClassVar[str]

    def __init__(self, conn: Connection) -> None:
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
