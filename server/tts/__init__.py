"""Text to speech: llama-server's `POST /tts` and OpenAI's `POST /v1/audio/speech`."""

from .routes import router

__all__ = ["router"]
