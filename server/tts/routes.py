"""`POST /tts` (llama-server) and `POST /v1/audio/speech` (OpenAI)."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from llamactl import MEDIA_TYPES, encode, pcm_bytes

from ..common import server_state
from ..errors import APIError, bad_request
from ..sse import data_frame
from . import serving
from .protocol import SpeechBody, TTSBody, TTSRequest, parse_tts

router = APIRouter(tags=["audio"], lifespan=serving.tts_lifespan)

SPEECH_FORMATS = ("mp3", "wav", "flac", "pcm")
MAX_BODY = 32 * 1024 * 1024

_TTS_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": TTSBody.model_json_schema()},
            "multipart/form-data": {"schema": TTSBody.model_json_schema()},
        },
    }
}
_TTS_DOC: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "A mono 16-bit WAV file; with `stream`, raw PCM (s16le mono) sent as it is "
        "made, its rate in `Content-Type` (`audio/pcm;rate=N`) and `X-Sample-Rate`",
        "content": {"audio/wav": {}, "audio/pcm": {}},
    },
    501: {
        "description": "The configured TTS model cannot speak (`tts_model`), or `speaker_ref` "
        "was given to a synthesizer that cannot clone voices"
    },
}
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


def _rate_headers(rate: int) -> dict[str, str]:
    return {"X-Sample-Rate": str(rate), "X-Audio-Channels": "1", "X-Audio-Encoding": "s16le"}


async def _pcm_stream(chunks: AsyncIterator[np.ndarray]) -> AsyncIterator[bytes]:
    try:
        async for chunk in chunks:
            yield pcm_bytes(chunk)
    finally:
        await chunks.aclose()  # type: ignore[attr-defined]


@router.post(
    "/tts",
    summary="Speak text (llama-server)",
    responses=_TTS_DOC,
    openapi_extra=_TTS_BODY,
    response_class=Response,
)
async def create_tts(request: Request) -> Response:
    server_state(request)
    ctype = request.headers.get("content-type", "").lower()
    if ctype.startswith("multipart/"):
        form = await request.form(max_part_size=MAX_BODY)
        fields: dict[str, Any] = {}
        for key, value in form.multi_items():
            if hasattr(value, "read"):  # a file part: Starlette spools it without a bound
                value = await value.read(MAX_BODY + 1)
                if len(value) > MAX_BODY:
                    raise APIError(
                        413, f"Field '{key}': a file part holds {MAX_BODY // 2**20} MiB at most"
                    )
            fields[key] = value
        req = await run_in_threadpool(parse_tts, fields, form=True)
    else:
        req = await run_in_threadpool(_parse_json, await request.body())
    rate, chunks = await serving.start(
        request.app,
        req.input,
        voice=req.voice,
        speed=req.speed,
        speaker_ref=req.speaker_ref,
        seed=req.seed,
    )
    if req.stream:
        return StreamingResponse(
            _pcm_stream(chunks), media_type=f"audio/pcm;rate={rate}", headers=_rate_headers(rate)
        )
    samples = await serving.collect(chunks)
    wav = await run_in_threadpool(encode, samples, rate, "wav")
    return Response(wav, media_type="audio/wav", headers=_rate_headers(rate))


def _parse_json(raw: bytes) -> TTSRequest:
    """Off the event loop: a large body (base64 `speaker_ref`) takes a while to parse."""
    try:
        body = json.loads(raw or b"null")
    except (ValueError, RecursionError) as exc:
        raise bad_request(f"Invalid JSON in the request body: {exc}") from None
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    return parse_tts(body, form=False)


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
    rate, chunks = await serving.start(
        request.app, body.input, voice=serving.openai_voice(body.voice), speed=body.speed
    )
    headers = _rate_headers(rate)
    if body.stream_format == "sse":
        return StreamingResponse(
            _sse(chunks, rate, fmt), media_type="text/event-stream", headers=headers
        )
    if fmt == "pcm":
        media = f"audio/pcm;rate={rate}"
        return StreamingResponse(_pcm_stream(chunks), media_type=media, headers=headers)
    samples = await serving.collect(chunks)
    data = await run_in_threadpool(encode, samples, rate, fmt)
    return Response(data, media_type=MEDIA_TYPES[fmt], headers=headers)


async def _sse(chunks: AsyncIterator[np.ndarray], rate: int, fmt: str) -> AsyncIterator[str]:
    """pcm deltas as they are made; other formats as one delta once encoded."""
    try:
        if fmt == "pcm":
            async for chunk in chunks:
                yield _delta(pcm_bytes(chunk))
        else:
            samples = await serving.collect(chunks)
            yield _delta(await run_in_threadpool(encode, samples, rate, fmt))
    finally:
        await chunks.aclose()  # type: ignore[attr-defined]
    usage = {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
    yield data_frame({"type": "speech.audio.done", "usage": usage})


def _delta(data: bytes) -> str:
    return data_frame({"type": "speech.audio.delta", "audio": base64.b64encode(data).decode()})
