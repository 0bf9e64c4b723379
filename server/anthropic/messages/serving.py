"""Answering a Messages request: build the chat request, then reply as one message or a stream.

The reply functions take any async iterable of chat events, so the block mapping is testable
without a model. Usage follows Anthropic: `input_tokens` counts only prompt tokens evaluated
for this request, `cache_read_input_tokens` the ones reused from the prompt cache.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass
from typing import Any

from fastapi import Request

from llamactl import ChatRequest, ChatStream, Done, LlamactlError

from ...common import new_id, sampling_params
from ...disconnect import cancel_on_disconnect
from ...errors import APIError, from_engine_error
from ...limits import limits_of
from ...sse import event_frame
from ...state import ServerState
from ...stream_errors import anthropic_error_frame
from .blocks import BlockBuilder
from .convert import chat_messages, chat_tools, openai_tool_choice, thinking_plan
from .protocol import CountTokensRequest, Message, MessagesRequest, StopReason


@dataclass(frozen=True)
class Reply:
    """What the answer needs from its request."""

    id: str
    model: str
    prompt_tokens: int
    max_tokens: int
    stop_sequences: tuple[str, ...] = ()
    keep_thinking: bool = True
    omit_thinking_text: bool = False

    def builder(self) -> BlockBuilder:
        return BlockBuilder(
            keep_thinking=self.keep_thinking, omit_thinking_text=self.omit_thinking_text
        )


# ------------------------------------------------------------------------------ the request
def _tool_options(req: CountTokensRequest) -> dict[str, Any]:
    """tool_choice and parallelism in OpenAI's spelling, which the chat layer enforces."""
    options: dict[str, Any] = {}
    choice = openai_tool_choice(req)
    if choice is not None:
        options["tool_choice"] = choice
    no_parallel = req.tool_choice.disable_parallel_tool_use if req.tool_choice else None
    if no_parallel is not None:
        options["parallel_tool_calls"] = not no_parallel
    return options


def prompt_request(req: CountTokensRequest) -> ChatRequest:
    """The prompt side only: what `count_tokens` renders and `create` extends."""
    plan = thinking_plan(req.thinking)
    return ChatRequest(
        messages=chat_messages(req),
        tools=chat_tools(req),
        enable_thinking=plan.enable,
        reasoning_budget=plan.budget,
        **_tool_options(req),
    )


def chat_request(state: ServerState, req: MessagesRequest) -> ChatRequest:
    chat = prompt_request(req)
    chat.sampling = sampling_params(
        state, temperature=req.temperature, top_p=req.top_p, top_k=req.top_k
    )
    chat.max_tokens = req.max_tokens
    limits_of(state.settings).check_stops(req.stop_sequences or (), "stop_sequences")
    chat.stop = tuple(req.stop_sequences or ())
    return chat


def reply_for(state: ServerState, req: MessagesRequest, stream: ChatStream) -> Reply:
    plan = thinking_plan(req.thinking)
    return Reply(
        id=new_id("msg_"),
        model=req.model or state.model_id,  # the one rule: server/common.py check_model
        prompt_tokens=stream.prompt_tokens,
        max_tokens=req.max_tokens,
        stop_sequences=tuple(req.stop_sequences or ()),
        keep_thinking=plan.keep,
        omit_thinking_text=plan.omit_text,
    )


# ---------------------------------------------------------------------------------- the reply
def usage(done: Done) -> dict[str, int]:
    cached = done.usage.cached_tokens
    return {
        "input_tokens": done.usage.prompt_tokens - cached,
        "output_tokens": done.usage.completion_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
    }


def stop_of(reply: Reply, done: Done, tool_use: bool) -> tuple[StopReason, str | None]:
    """Anthropic's stop reasons. A stop word the caller asked for is `stop_sequence` (llama-server
    says `end_turn`); running out of context before `max_tokens` is
    `model_context_window_exceeded`."""
    if done.finish_reason == "length":
        if done.usage.completion_tokens < reply.max_tokens:
            return "model_context_window_exceeded", None
        return "max_tokens", None
    if tool_use:
        return "tool_use", None
    if done.stop_string is not None and done.stop_string in reply.stop_sequences:
        return "stop_sequence", done.stop_string
    return "end_turn", None


async def message(events: AsyncIterable[Any], reply: Reply) -> Message:
    """Run to the end and return the whole message."""
    builder = reply.builder()
    done: Done | None = None
    async for event in events:
        if isinstance(event, Done):
            done = event
            break
        builder.feed(event)
    builder.close()
    if done is None:
        raise APIError(500, "the generation ended without a result")
    stop_reason, stop_sequence = stop_of(reply, done, builder.has_tool_use)
    return Message(
        id=reply.id,
        model=reply.model,
        content=builder.content,
        stop_reason=stop_reason,
        stop_sequence=stop_sequence,
        usage=usage(done),
    )


def _message_start(reply: Reply) -> dict[str, Any]:
    """The cache hit is known only at the end: `message_start` counts the whole prompt as input,
    and `message_delta` carries the final, cumulative input counts (as Anthropic's API does)."""
    return {
        "type": "message_start",
        "message": {
            "id": reply.id,
            "type": "message",
            "role": "assistant",
            "model": reply.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": reply.prompt_tokens,
                "output_tokens": 0,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
            },
        },
    }


def _frames(events: list[dict[str, Any]]) -> list[str]:
    return [event_frame(event["type"], event) for event in events]


# Anthropic's keep-alive: an event, not an SSE comment (Claude Code's stream watchdog ignores
# comments and aborts a long prefill without it)
PING_EVENT = event_frame("ping", {"type": "ping"})


async def stream_frames(events: AsyncIterable[Any], reply: Reply) -> AsyncIterator[str]:
    """SSE frames: message_start, a ping, the blocks, message_delta, message_stop. An error
    after the first frame is sent as an `error` event, which ends the stream."""
    yield event_frame("message_start", _message_start(reply))
    yield PING_EVENT
    builder = reply.builder()
    try:
        async for event in events:
            if isinstance(event, Done):
                for frame in _frames(builder.close()):
                    yield frame
                stop_reason, stop_sequence = stop_of(reply, event, builder.has_tool_use)
                delta = {"stop_reason": stop_reason, "stop_sequence": stop_sequence}
                end = {"type": "message_delta", "delta": delta, "usage": usage(event)}
                yield event_frame("message_delta", end)
                yield event_frame("message_stop", {"type": "message_stop"})
                return
            for frame in _frames(builder.feed(event)):
                yield frame
    except Exception as exc:  # the status line is gone: report in-band and stop
        yield anthropic_error_frame(exc)
        return
    yield anthropic_error_frame(APIError(500, "the generation ended without a result"))


async def message_unless_disconnected(
    stream: ChatStream, reply: Reply, request: Request
) -> Message:
    """A non-streaming reply; the generation is cancelled if the client goes away meanwhile."""
    try:
        async with cancel_on_disconnect(request, stream.cancel):
            return await message(stream, reply)
    except LlamactlError as exc:
        raise from_engine_error(exc) from exc
    finally:
        stream.cancel()
