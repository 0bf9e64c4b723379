"""The token routes; everything past reading the body runs in a preparation worker."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from ...common import check_model, render_chat, server_state
from ...limits import limits_of
from ...openai.chat.protocol import ChatCompletionRequest
from ...openai.chat.serving import chat_request
from ...prepare import PreparedBodyRoute, off_loop
from ...state import ServerState
from . import serving
from .protocol import (
    DetokenizeRequest,
    DetokenizeResponse,
    InputTokensResponse,
    PromptResponse,
    TokenizeRequest,
    TokenizeResponse,
)

__all__ = ["router"]

router = APIRouter(tags=["tokens"], route_class=PreparedBodyRoute)


@router.post("/tokenize", response_model=TokenizeResponse, summary="Tokenize text (llama-server)")
async def tokenize(body: TokenizeRequest, request: Request) -> Response:
    """`content` may hold at most --max-tokenize-bytes bytes of UTF-8 text (1 MiB by
    default); past it, a 400 naming the limit."""
    # the answer (a million tokens is seconds of Python) is built in the worker too
    state = server_state(request)
    model = state.require_text_model()
    limits = limits_of(state.settings)

    def run() -> Response:
        limits.check_tokenize(serving.content_size(body.content))
        tokens = serving.tokenize(
            model, body.content, add_special=body.add_special, parse_special=body.parse_special
        )
        if body.with_pieces:
            return serving.json_answer("tokens", serving.pieces(model, tokens))
        return serving.json_answer("tokens", tokens)

    return await off_loop(run)


@router.post(
    "/detokenize", response_model=DetokenizeResponse, summary="Token ids to text (llama-server)"
)
async def detokenize(body: DetokenizeRequest, request: Request) -> Response:
    # the ids are bounded by the JSON-value limit; the answer is built in the worker
    model = server_state(request).require_text_model()

    def run() -> Response:
        return serving.json_answer("content", serving.detokenize(model, body.tokens))

    return await off_loop(run)


def _render(state: ServerState, body: ChatCompletionRequest) -> tuple[str, int]:
    check_model(state, body.model)
    request, _ = chat_request(state, body, 1)
    rendered = render_chat(state, request)
    return rendered.text, len(rendered.tokens)


@router.post(
    "/apply-template",
    response_model=PromptResponse,
    summary="Render a chat with the model's template, without generating (llama-server)",
)
async def apply_template(body: ChatCompletionRequest, request: Request) -> PromptResponse:
    state = server_state(request)
    text, _ = await off_loop(_render, state, body)
    return PromptResponse(prompt=text)


@router.post(
    "/v1/chat/completions/input_tokens",
    response_model=InputTokensResponse,
    summary="Count a chat completion's prompt tokens",
)
@router.post(
    "/chat/completions/input_tokens", response_model=InputTokensResponse, include_in_schema=False
)
async def chat_input_tokens(body: ChatCompletionRequest, request: Request) -> InputTokensResponse:
    state = server_state(request)
    _, count = await off_loop(_render, state, body)
    return InputTokensResponse(input_tokens=count)
