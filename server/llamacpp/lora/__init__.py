"""llama-server's `GET /lora-adapters` and `POST /lora-adapters` (with `--lora`)."""

from .routes import router

__all__ = ["router"]
