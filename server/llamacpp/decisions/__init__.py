"""Decision models: `POST /v1/systemone` and `POST /v1/decisions`."""

from .routes import router

__all__ = ["router"]
