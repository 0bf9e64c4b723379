"""llama-server's `GET /slots`: what each slot is doing."""

from .routes import router

__all__ = ["router"]
