"""Infill requests: the FIM prompt (`infill_tokens`, llama-server's format_infill), then the
native completion service, answered in its shape."""

from __future__ import annotations

from llamactl import FimTokens, infill_tokens

from ...errors import bad_request
from ...state import ServerState
from ..completion import serving as completion
from ..tokens.serving import tokenize
from .protocol import InfillRequest

__all__ = ["start"]


def start(state: ServerState, body: InfillRequest) -> completion.NativeJob:
    """The model's FIM tokens checked first (llama-server's 501), then the body; submitted."""
    engine = state.require_text_engine()
    model = engine.model
    FimTokens.of(model).require()
    if body.input_prefix is None:
        raise bad_request('"input_prefix" is required')
    if body.input_suffix is None:
        raise bad_request('"input_suffix" is required')

    def plain(value: str | list[int | str], field: str) -> list[int]:
        return tokenize(model, value, add_special=False, parse_special=False, field=field)

    max_tokens = state.settings.max_tokens
    tokens = infill_tokens(
        model,
        plain(body.input_prefix, "input_prefix"),
        plain(body.input_suffix, "input_suffix"),
        [(chunk.filename, chunk.text) for chunk in body.input_extra],
        model.tokenize(body.prompt, add_special=False, parse_special=True),
        n_batch=state.settings.batch_size,
        n_predict=max_tokens if max_tokens is not None else -1,
        n_ctx=engine.n_ctx_slot,
    )
    return completion.start_prompts(state, body, [tokens], listed=False)
