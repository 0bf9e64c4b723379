"""The app's speech engine, shared by `/v1/audio/transcriptions` and `/v1/realtime`.

Created on first use from the server's settings (a server that never hears audio never loads
a speech model), closed with the app. Its worker keeps speech work off the cores while the
language model decodes (see `llamactl.engine.audio.worker`).
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

from llamactl import AudioService

_lock = threading.Lock()


def audio_service(app: FastAPI) -> AudioService:
    service = getattr(app.state, "llamactl_audio", None)
    if service is not None:
        return service
    with _lock:
        service = getattr(app.state, "llamactl_audio", None)
        if service is None:
            state = app.state.llamactl
            settings = state.settings
            service = AudioService(
                getattr(settings, "transcribe_model", None),
                mmproj=getattr(settings, "transcribe_mmproj", None),
                threads=getattr(settings, "transcribe_threads", 0) or settings.threads,
                llm_busy=lambda: _llm_busy(state),
            )
            app.state.llamactl_audio = service
    return service


def _llm_busy(state: Any) -> bool:
    engine = state.engine
    return engine is not None and (engine.busy_slots > 0 or engine.queue_depth > 0)


def close_audio_service(app: FastAPI) -> None:
    with _lock:
        service = getattr(app.state, "llamactl_audio", None)
        app.state.llamactl_audio = None
    if service is not None:
        service.close()


@asynccontextmanager
async def audio_lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Router lifespan: frees the speech model when the app stops."""
    try:
        yield
    finally:
        close_audio_service(app)
