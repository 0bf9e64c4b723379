"""The Realtime GA protocol (`protocol`), its errors (`errors`) and llamactl's one client of
it (`client`, imported on its own: it brings websockets and httpx, which the server's
validation does not need). Nothing here imports FastAPI or Textual."""

from . import protocol
from .errors import (
    AuthenticationError,
    ConnectionClosedError,
    ProtocolError,
    RealtimeClientError,
    ServerUnreachableError,
)

__all__ = [
    "AuthenticationError",
    "ConnectionClosedError",
    "ProtocolError",
    "RealtimeClientError",
    "ServerUnreachableError",
    "protocol",
]
