"""llama-server's `POST /infill`: fill-in-the-middle completion for models with FIM tokens."""

from .routes import router

__all__ = ["router"]
