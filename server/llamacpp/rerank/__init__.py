"""llama-server's reranking: `POST /v1/rerank` (and `/rerank`, `/reranking`, `/v1/reranking`)."""

from .routes import router

__all__ = ["router"]
