"""llama-server's text to speech: `POST /tts`."""

from .routes import router

__all__ = ["router"]
