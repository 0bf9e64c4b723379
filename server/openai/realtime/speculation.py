"""An answer started during the silence that may end a turn.

A voice turn ends after a stretch of silence (server VAD's `silence_duration_ms`, or Smart
Turn's reading and the short silence of semantic VAD), and only then did the answer start:
its prompt, then every token up to the first spoken clause, all after the user stopped. The
transcription stream reads a quiet turn before it ends and offers that reading as a
`Tentative` transcript, which is exactly the transcript the turn gets if it ends in this
silence. The session then starts the very chat request that turn's answer would make; the
engine prefills it and generates into the stream's buffer while the turn is decided. When
the turn ends with that transcript, the response takes the stream over (the request is
compared whole: messages, sampling, limits) and its first clause is already there. When the
speaker goes on, or anything else comes first, the stream is cancelled: the slot keeps the
prompt's prefix in its cache, so little of the work is lost.
"""

from __future__ import annotations

import logging

from llamactl import ChatRequest, ChatStream

from ...state import ServerState

__all__ = ["Speculation"]

log = logging.getLogger("llamactl.server.openai.realtime")


class Speculation:
    """At most one answer started ahead of its turn; `take` hands it to the response whose
    request it is, anything else cancels it."""

    def __init__(self, state: ServerState) -> None:
        self._state = state
        self._pending: tuple[ChatRequest, ChatStream] | None = None

    def start(self, request: ChatRequest) -> None:
        """Start `request` now (replacing any answer started before)."""
        self.cancel()
        try:
            chat = self._state.require_chat().start(request)
        except Exception as exc:  # the turn's own response will meet and report it
            log.debug("no answer started ahead of the turn: %s", exc)
            return
        self._pending = (request, chat)

    def take(self, request: ChatRequest) -> ChatStream | None:
        """The stream started for `request`, if that is what was started; else None (and
        what was started is cancelled)."""
        pending, self._pending = self._pending, None
        if pending is None:
            return None
        started, chat = pending
        if started == request and not chat.raw.cancelled:
            return chat
        chat.cancel()
        return None

    def cancel(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending[1].cancel()
