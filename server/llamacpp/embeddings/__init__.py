"""llama-server's native embeddings: `POST /embedding` and `POST /embeddings`."""

from .routes import router

__all__ = ["router"]
