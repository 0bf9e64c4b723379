"""OpenAI chat completions (`/v1/chat/completions`) and llama-server's control endpoint."""

from .routes import router

__all__ = ["router"]
