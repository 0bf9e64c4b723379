"""OpenAI text completions (`/v1/completions`) straight on the engine: no chat template."""

from .routes import router

__all__ = ["router"]
