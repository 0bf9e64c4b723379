"""`/v1/realtime`: OpenAI's GA Realtime API over a websocket.

`connection.py` owns the socket (framing, event ids, errors, the reader loop); a session
class per `session.type` owns the behaviour, and sees the connection only as the `Socket` of
`session.py`. Client events are validated, and server events built, through the models of
`llamactl.realtime.protocol`, the protocol's one definition, which clients and tests share.
Transcription sessions live in `transcription.py`, conversation sessions (`type: "realtime"`)
in `conversation.py` (their items in `items.py`, each answer a `response.py`); `kinds.py`
names both, and `routes.py` gives that table to each connection.
"""

from .routes import router

__all__ = ["router"]
