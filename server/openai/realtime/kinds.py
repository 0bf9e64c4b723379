"""`session.type` -> the session class that serves it.

The one module that names every session kind: `routes.py` hands this table to each
`Connection`, so the connection picks a kind without importing the sessions (which import
`session.py`, never the connection) and no module of the package imports one that imports
it back.
"""

from __future__ import annotations

from .conversation import ConversationSession
from .session import RealtimeSession
from .transcription import TranscriptionSession

__all__ = ["SESSION_KINDS"]

SESSION_KINDS: dict[str, type[RealtimeSession]] = {
    cls.kind: cls for cls in (TranscriptionSession, ConversationSession)
}
