"""Typed errors raised by the engine; front ends map them to exit codes or HTTP statuses."""

from __future__ import annotations


class LlamactlError(Exception):
    """Base of every error a user may see; its message is meant for humans."""


class ModelNotFoundError(LlamactlError):
    pass


class ModelLoadError(LlamactlError):
    pass


class ConfigError(LlamactlError):
    pass


class ContextLengthError(LlamactlError):
    """The prompt (plus what must be generated) does not fit a slot's context."""

    def __init__(self, n_prompt: int, n_ctx: int, *, at_least: bool = False) -> None:
        has = f"at least {n_prompt}" if at_least else f"{n_prompt}"
        super().__init__(
            f"the request exceeds the available context size: the prompt has {has} tokens "
            f"and a slot holds {n_ctx}; shorten the prompt or raise --ctx-size"
        )
        self.n_prompt = n_prompt
        self.n_ctx = n_ctx


class InvalidRequestError(LlamactlError):
    """The caller asked for something invalid (bad parameter, bad messages)."""


class TemplateError(InvalidRequestError):
    """The chat template refused the messages or failed to render."""


class EngineClosedError(LlamactlError):
    pass


class QueueFullError(LlamactlError):
    """More requests are waiting than --max-queue allows."""
