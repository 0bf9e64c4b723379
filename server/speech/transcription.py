"""The app's speech-to-text service, shared by `/v1/audio/transcriptions` and `/v1/realtime`.

It is the server state's `transcription` service: made on first use from the server's
settings (a server that never hears audio never loads a speech model), closed with the state.
Its worker keeps speech work off the cores while the language model decodes (see
`llamactl.engine.audio.worker`).
"""

from __future__ import annotations

from fastapi import FastAPI

from llamactl import AudioService

from ..state import ServerState

__all__ = ["audio_service"]


def audio_service(app: FastAPI) -> AudioService:
    state: ServerState = app.state.llamactl
    return state.transcription.get()
