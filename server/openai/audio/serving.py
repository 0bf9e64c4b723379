"""Running one transcription request on the app's speech engine."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from typing import Any

from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool

from llamactl import EMBEDDED_ALIASES, AudioService, ModelLoadError, ModelNotFoundError, Segment

from ...errors import APIError
from ...speech.transcription import audio_service


async def ready_service(app: FastAPI) -> AudioService:
    """The speech engine with its model loaded (off the event loop), or 503."""
    service = audio_service(app)
    try:
        await run_in_threadpool(service.worker)
    except (ModelNotFoundError, ModelLoadError) as exc:
        raise APIError(503, f"the speech model is unavailable: {exc}", "unavailable_error") from exc
    return service


def check_transcription_model(service: AudioService, app: FastAPI, model: str | None) -> None:
    """The server has one transcriber; OpenAI's model names are accepted for it, so code
    written for OpenAI runs unchanged."""
    if not model:
        return
    configured = app.state.llamactl.settings.transcribe_model
    names = {service.transcriber.name, str(configured or "")} | EMBEDDED_ALIASES
    if model not in names:
        raise APIError(
            400,
            f"Field 'model': unknown transcription model '{model}'; this server transcribes "
            f"with '{service.transcriber.name}'",
            "invalid_request_error",
        )


async def segments(
    service: AudioService,
    pcm: Any,
    rate: int,
    *,
    language: str | None,
    prompt: str | None,
) -> AsyncGenerator[Segment, None]:
    """The recording's segments as the worker reads them; cancelled when the caller stops."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Any] = asyncio.Queue()

    def deliver(item: Any) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody is listening
            loop.call_soon_threadsafe(queue.put_nowait, item)

    handle = service.submit(pcm, rate, deliver, language=language, prompt=prompt)
    try:
        while True:
            item = await queue.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        handle.cancel()
