"""Anthropic's Messages API (`/v1/messages`): protocol models, request mapping, replies."""

from .routes import router

__all__ = ["router"]
