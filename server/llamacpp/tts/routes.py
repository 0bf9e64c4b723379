"""`POST /tts`, llama-server's text-to-speech route (JSON or multipart)."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from llamactl import encode

from ...common import server_state
from ...errors import APIError, bad_request
from ...prepare import read_json
from ...speech import synthesis
from .protocol import TTSBody, TTSRequest, parse_tts

router = APIRouter(tags=["audio"])

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
            if isinstance(value, str):
                fields[key] = value
                continue
            data = await value.read(MAX_BODY + 1)  # Starlette spools a file part unbounded
            if len(data) > MAX_BODY:
                raise APIError(
                    413, f"Field '{key}': a file part holds {MAX_BODY // 2**20} MiB at most"
                )
            fields[key] = data
        req = await run_in_threadpool(parse_tts, fields, form=True)
    else:
        req = await read_json(request, _parse_json)  # held to the JSON-value limit when big
    rate, chunks = await synthesis.start(
        request.app,
        req.input,
        voice=req.voice,
        speed=req.speed,
        speaker_ref=req.speaker_ref,
        seed=req.seed,
    )
    if req.stream:
        return StreamingResponse(
            synthesis.pcm_stream(chunks),
            media_type=f"audio/pcm;rate={rate}",
            headers=synthesis.rate_headers(rate),
        )
    samples = await synthesis.collect(chunks)
    wav = await run_in_threadpool(encode, samples, rate, "wav")
    return Response(wav, media_type="audio/wav", headers=synthesis.rate_headers(rate))


def _parse_json(raw: bytes) -> TTSRequest:
    """Off the event loop: a large body (base64 `speaker_ref`) takes a while to parse."""
    try:
        body = json.loads(raw or b"null")
    except (ValueError, RecursionError) as exc:
        raise bad_request(f"Invalid JSON in the request body: {exc}") from None
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    return parse_tts(body, form=False)
