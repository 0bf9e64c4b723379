"""`POST /v1/audio/speech`, OpenAI's text-to-speech route."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any, Literal

import numpy as np
from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from llamactl import MEDIA_TYPES, encode, pcm_bytes

from ...common import server_state
from ...errors import bad_request
from ...prepare import PreparedBodyRoute
from ...speech import synthesis
from ...sse import data_frame
from ..voices import openai_voice

__all__ = ["SpeechBody", "router"]

# the body is parsed in a preparation worker, held to the JSON-value limit when big
router = APIRouter(tags=["audio"], route_class=PreparedBodyRoute)

SPEECH_FORMATS = ("mp3", "wav", "flac", "pcm")
MAX_INPUT = 4096  # OpenAI's limit

_SPEECH_DOC: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The audio in `response_format`; `pcm` is sent as it is made; with "
        "`stream_format=sse`, `speech.audio.delta` events then `speech.audio.done`",
        "content": {
            "audio/mpeg": {},
            "audio/wav": {},
            "audio/flac": {},
            "audio/pcm": {},
            "text/event-stream": {},
        },
    }
}


class SpeechBody(BaseModel):
    """OpenAI's `POST /v1/audio/speech`."""

    model: str = Field("", description="Any name is accepted (tts-1, gpt-4o-mini-tts...).")
    input: str = Field(min_length=1, max_length=MAX_INPUT, description="Text to speak.")
    voice: str | None = Field(
        None, description="An OpenAI voice name (mapped to eSpeak NG voices) or an eSpeak NG voice."
    )
    instructions: str | None = Field(None, description="Accepted and ignored by eSpeak NG.")
    response_format: str = Field("mp3", description="mp3, wav, flac or pcm (s16le mono).")
    speed: float = Field(1.0, ge=0.25, le=4.0)
    stream_format: Literal["audio", "sse"] = Field("audio")


@router.post(
    "/v1/audio/speech",
    summary="Speak text (OpenAI)",
    responses=_SPEECH_DOC,
    response_class=Response,
)
@router.post("/audio/speech", include_in_schema=False, response_class=Response)
async def create_speech(request: Request, body: SpeechBody) -> Response:
    server_state(request)
    fmt = body.response_format.lower()
    if fmt not in SPEECH_FORMATS:
        raise bad_request(
            f"Field 'response_format': expected one of {', '.join(SPEECH_FORMATS)}, got '{fmt}'"
        )
    if not body.input.strip():
        raise bad_request("Field 'input': must not be empty")
    rate, chunks = await synthesis.start(
        request.app, body.input, voice=openai_voice(body.voice), speed=body.speed
    )
    headers = synthesis.rate_headers(rate)
    if body.stream_format == "sse":
        return StreamingResponse(
            _sse(chunks, rate, fmt), media_type="text/event-stream", headers=headers
        )
    if fmt == "pcm":
        media = f"audio/pcm;rate={rate}"
        return StreamingResponse(synthesis.pcm_stream(chunks), media_type=media, headers=headers)
    samples = await synthesis.collect(chunks)
    data = await run_in_threadpool(encode, samples, rate, fmt)
    return Response(data, media_type=MEDIA_TYPES[fmt], headers=headers)


async def _sse(chunks: AsyncIterator[np.ndarray], rate: int, fmt: str) -> AsyncIterator[str]:
    """pcm deltas as they are made; other formats as one delta once encoded."""
    try:
        if fmt == "pcm":
            async for chunk in chunks:
                yield _delta(pcm_bytes(chunk))
        else:
            samples = await synthesis.collect(chunks)
            yield _delta(await run_in_threadpool(encode, samples, rate, fmt))
    finally:
        await chunks.aclose()  # type: ignore[attr-defined]
    usage = {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
    yield data_frame({"type": "speech.audio.done", "usage": usage})


def _delta(data: bytes) -> str:
    return data_frame({"type": "speech.audio.delta", "audio": base64.b64encode(data).decode()})
