"""llama-server's `/props`: the server's settings and the model's template."""

from .routes import router

__all__ = ["router"]
