"""The app's synthesizer and the bridge from its blocking iterator to the event loop.

The synthesizer is created on first use (a server that never speaks loads nothing) and every
step of it runs on a worker thread, so the event loop never waits on eSpeak. When a client
leaves mid-stream, closing the async iterator closes the backend's iterator, which cancels it.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager

import numpy as np
from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool

from llamactl import (
    CannotSpeakError,
    NotSupportedError,
    Synthesizer,
    as_int16,
    open_mtmd_synthesizer,
    open_synthesizer,
)

_lock = threading.Lock()
_ATTR = "llamactl_tts"

# OpenAI's voice names, spoken by eSpeak NG variants so each name sounds distinct and stable.
OPENAI_VOICES = {
    "alloy": "en-us",
    "ash": "en-us+m3",
    "ballad": "en-gb+m2",
    "coral": "en-us+f2",
    "echo": "en-us+m1",
    "fable": "en-gb",
    "nova": "en-us+f3",
    "onyx": "en-us+m7",
    "sage": "en-gb+f2",
    "shimmer": "en-us+f4",
    "verse": "en-us+m2",
    "marin": "en-us+f1",
    "cedar": "en-us+m4",
}

# Tests replace this to plug another backend in.
SYNTHESIZER_FACTORY: Callable[[], Synthesizer] = open_synthesizer


def synthesizer(app: FastAPI) -> Synthesizer:
    """The app's synthesizer: eSpeak NG, or the configured llama.cpp TTS model (`tts_model`);
    a model that cannot speak raises CannotSpeakError on every call (HTTP 501)."""
    synth = getattr(app.state, _ATTR, None)
    if isinstance(synth, CannotSpeakError):
        raise synth
    if synth is not None:
        return synth
    with _lock:
        synth = getattr(app.state, _ATTR, None)
        if synth is None:
            try:
                synth = _factory(app)()
            except CannotSpeakError as exc:
                synth = exc
            setattr(app.state, _ATTR, synth)
    if isinstance(synth, CannotSpeakError):
        raise synth
    return synth


def _factory(app: FastAPI) -> Callable[[], Synthesizer]:
    settings = getattr(getattr(app.state, "llamactl", None), "settings", None)
    model = getattr(settings, "tts_model", None)
    if model is None or SYNTHESIZER_FACTORY is not open_synthesizer:
        return SYNTHESIZER_FACTORY
    return lambda: open_mtmd_synthesizer(model, settings.tts_mmproj)


@asynccontextmanager
async def tts_lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Router lifespan: frees the synthesizer when the app stops."""
    try:
        yield
    finally:
        with _lock:
            synth = getattr(app.state, _ATTR, None)
            setattr(app.state, _ATTR, None)
        if isinstance(synth, Synthesizer):
            synth.close()


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
        synth = synthesizer(app)
        if speaker_ref and not synth.can_clone:
            raise NotSupportedError(
                f"Field 'speaker_ref': the {synth.name} voice cannot be cloned from reference "
                "audio; voice cloning needs an mtmd TTS model"
            )
        chunks = synth.synthesize(
            text, voice=voice, speed=speed, speaker_ref=speaker_ref, seed=seed
        )
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


def openai_voice(name: str | None) -> str | None:
    """OpenAI names map to eSpeak NG voices; anything else goes to the synthesizer, which
    accepts only names from its own list (a 400 otherwise)."""
    if name is None:
        return None
    return OPENAI_VOICES.get(name.lower(), name)
