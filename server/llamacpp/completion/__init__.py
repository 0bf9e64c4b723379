"""llama-server's native completion: `POST /completion` and `POST /completions`."""

from .routes import router

__all__ = ["router"]
