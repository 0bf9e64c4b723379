"""OpenAI's audio routes: `POST /v1/audio/transcriptions` and `POST /v1/audio/speech`."""

from fastapi import APIRouter

from . import speech, transcriptions

router = APIRouter()
router.include_router(transcriptions.router)
router.include_router(speech.router)

__all__ = ["router"]
