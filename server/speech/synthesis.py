"""The app's synthesizer, shared by `/tts`, `/v1/audio/speech` and `/v1/realtime`, and the bridge
from its blocking iterator to the event loop.

The synthesizer (the server state's `speech` service) is created on first use (a server that
never speaks loads nothing) and every step of it runs on a worker thread, so the event loop
never waits on eSpeak. When a client leaves mid-stream, closing the async iterator closes the
backend's iterator, which cancels it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import numpy as np
from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool

from llamactl import CannotSpeakError, Synthesizer, UnsupportedVoiceFeature, as_int16, pcm_bytes

from ..services import not_supported
from ..state import ServerState

__all__ = ["collect", "pcm_stream", "rate_headers", "start", "synthesizer"]


def synthesizer(app: FastAPI) -> Synthesizer:
    """The server state's `speech` service: eSpeak NG, or the configured llama.cpp TTS model
    (`tts_model`); a model that cannot speak raises CannotSpeakError on every call (HTTP 501)."""
    state: ServerState = app.state.llamactl
    return state.speech.get()


async def start(
    app: FastAPI,
    text: str,
    *,
    voice: str | None,
    speed: float,
    speaker_ref: bytes | None = None,
    seed: int | None = None,
) -> tuple[int, AsyncIterator[np.ndarray]]:
    """(sample rate, int16 chunks). Bad voices and unsupported cloning fail here, before any
    response is started, so they become proper 400 / 501 answers (a model that cannot speak,
    cloning without a cloning model: `NotSupportedError`s)."""

    def open_stream() -> tuple[int, Iterator[np.ndarray]]:
        try:
            synth = synthesizer(app)
        except CannotSpeakError as exc:
            raise not_supported(str(exc)) from None
        if speaker_ref and not synth.can_clone:
            raise not_supported(
                f"Field 'speaker_ref': the {synth.name} voice cannot be cloned from reference "
                "audio; voice cloning needs an mtmd TTS model"
            )
        try:
            chunks = synth.synthesize(
                text, voice=voice, speed=speed, speaker_ref=speaker_ref, seed=seed
            )
        except UnsupportedVoiceFeature as exc:
            raise not_supported(str(exc)) from None
        return synth.sample_rate, chunks

    rate, chunks = await run_in_threadpool(open_stream)
    return rate, _drain(chunks)


async def _drain(chunks: Iterator[np.ndarray]) -> AsyncIterator[np.ndarray]:
    try:
        while (chunk := await run_in_threadpool(next, chunks, None)) is not None:
            yield as_int16(chunk)
    finally:
        await run_in_threadpool(_close, chunks)


def _close(chunks: Iterator[np.ndarray]) -> None:
    close = getattr(chunks, "close", None)
    if close is not None:
        close()


async def collect(chunks: AsyncIterator[np.ndarray]) -> np.ndarray:
    parts = [chunk async for chunk in chunks]
    return np.concatenate(parts) if parts else np.zeros(0, np.int16)


def rate_headers(rate: int) -> dict[str, str]:
    """The headers that tell a client how to play raw PCM."""
    return {"X-Sample-Rate": str(rate), "X-Audio-Channels": "1", "X-Audio-Encoding": "s16le"}


async def pcm_stream(chunks: AsyncIterator[np.ndarray]) -> AsyncIterator[bytes]:
    try:
        async for chunk in chunks:
            yield pcm_bytes(chunk)
    finally:
        await chunks.aclose()  # type: ignore[attr-defined]
