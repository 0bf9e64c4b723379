"""OpenAI speech to text: `POST /v1/audio/transcriptions`."""

from .routes import router

__all__ = ["router"]
