"""OpenAI's `POST /v1/embeddings` (with `--embedding`)."""

from .routes import router

__all__ = ["router"]
