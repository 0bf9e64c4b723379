"""`/v1/realtime`: OpenAI's GA Realtime API over a websocket.

`connection.py` owns the socket (framing, event ids, errors, the reader loop); a session
class per `session.type` owns the behaviour. Client events are validated through the models of
`llamactl.realtime.protocol`, the protocol's one definition, which clients and tests share.
Transcription sessions live in `transcription.py`; conversation sessions (`type: "realtime"`)
plug into `SESSION_KINDS`.
"""

from .routes import router

__all__ = ["router"]
