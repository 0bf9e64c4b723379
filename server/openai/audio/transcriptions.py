"""`POST /v1/audio/transcriptions`, OpenAI's multipart speech-to-text route."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, File, Form, Request, UploadFile
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.concurrency import run_in_threadpool

from llamactl import Segment, read_audio

from ...common import server_state
from ...errors import APIError, bad_request
from ...sse import data_frame, sse_response
from ...stream_errors import openai_error_frame
from . import formats
from .serving import check_transcription_model, ready_service, segments

router = APIRouter(tags=["audio"])

# The default upload bound, for the body-limit middleware; the route itself reads the setting.

_DOC: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "`json` / `verbose_json`: a transcription object; `text`, `srt`, `vtt`: "
        "text; with `stream=true`, server-sent events `transcript.text.delta` then "
        "`transcript.text.done`",
        "content": {"text/plain": {}, "text/event-stream": {}},
    }
}


@router.post("/v1/audio/transcriptions", summary="Transcribe audio into text", responses=_DOC)
@router.post("/audio/transcriptions", include_in_schema=False)
async def create_transcription(
    request: Request,
    file: Annotated[UploadFile, File(description="WAV, FLAC, MP3, Ogg... audio file")],
    model: Annotated[str, Form()] = "",
    language: Annotated[str | None, Form()] = None,
    prompt: Annotated[str | None, Form()] = None,
    response_format: Annotated[str, Form()] = "json",
    temperature: Annotated[float | None, Form()] = None,
    stream: Annotated[bool, Form()] = False,
    timestamp_granularities: Annotated[
        list[str] | None, Form(alias="timestamp_granularities[]")
    ] = None,
) -> Response:
    state = server_state(request)
    if response_format not in formats.FORMATS:
        raise bad_request(
            f"Field 'response_format': expected one of {', '.join(formats.FORMATS)}, "
            f"got '{response_format}'"
        )
    if stream and response_format not in ("json", "text"):
        raise bad_request("Field 'stream': streaming works with response_format json or text")
    if temperature is not None and not 0.0 <= temperature <= 1.0:
        raise bad_request(f"Field 'temperature': must be between 0 and 1, got {temperature}")
    if "word" in (timestamp_granularities or []):
        raise bad_request("Field 'timestamp_granularities[]': only 'segment' is supported")
    settings = state.settings
    max_upload = settings.max_audio_upload_mib * 1024 * 1024
    data = await file.read(max_upload + 1)
    if len(data) > max_upload:
        raise APIError(
            413,
            f"Field 'file': the audio file is larger than {settings.max_audio_upload_mib} MiB "
            "(max_audio_upload_mib)",
        )
    service = await ready_service(request.app)
    check_transcription_model(service, request.app, model)
    language = service.transcriber.check_language(language)
    pcm, rate = await run_in_threadpool(
        read_audio,
        data,
        max_seconds=settings.max_audio_seconds,
        rate=service.transcriber.sample_rate,  # decoded straight to the model's rate
    )
    duration = pcm.size / rate
    parts = segments(service, pcm, rate, language=language, prompt=prompt)
    if stream:
        return sse_response(_stream_frames(parts), ping_interval=state.settings.sse_ping_interval)
    found = [s async for s in parts]
    text = formats.text_of(found)
    if response_format == "json":
        return JSONResponse({"text": text, "usage": formats.usage(duration)})
    if response_format == "verbose_json":
        return JSONResponse(formats.verbose_json(found, duration, language or "en"))
    if response_format == "srt":
        return PlainTextResponse(formats.srt(found), media_type="application/x-subrip")
    if response_format == "vtt":
        return PlainTextResponse(formats.vtt(found), media_type="text/vtt")
    return PlainTextResponse(text + "\n")


async def _stream_frames(parts: AsyncGenerator[Segment, None]) -> AsyncIterator[str]:
    texts: list[str] = []
    try:
        async for segment in parts:
            delta = segment.text if not texts else " " + segment.text
            texts.append(segment.text)
            yield data_frame({"type": "transcript.text.delta", "delta": delta})
    except Exception as exc:  # headers are gone: report in-band, as the chat routes do
        yield openai_error_frame(APIError(500, str(exc)))
        return
    finally:
        await parts.aclose()  # the client left: stop reading the rest of the file
    yield data_frame({"type": "transcript.text.done", "text": " ".join(texts)})
