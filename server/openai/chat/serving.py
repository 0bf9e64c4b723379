"""Chat completions: a request becomes a `ChatRequest`; chat events become OpenAI chunks or
one `chat.completion`.

All `n` choices come from one engine request (the prompt is decoded once), share one id and
are told apart by `choices[].index`. Live completions are registered in `ServerState` under
that id so the control endpoint can end their reasoning.
"""

from __future__ import annotations

import weakref
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request

from llamactl import (
    ChatEvent,
    ChatRequest,
    ChatStream,
    ContentDelta,
    Done,
    PromptProgress,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
)

from ...common import (
    INT32_MAX,
    check_int_range,
    check_model,
    new_id,
    now,
    progress_of,
    start_chat,
)
from ...disconnect import cancel_on_disconnect
from ...errors import bad_request
from ...sse import DONE, data_frame
from ...state import ServerState
from ...stream_errors import openai_error_frame
from . import params
from .protocol import ChatCompletionRequest

# Streams whose completion asked for `reasoning_control`; weak, so finished streams drop out.
_controllable: weakref.WeakSet[ChatStream] = weakref.WeakSet()


def is_controllable(stream: ChatStream) -> bool:
    return stream in _controllable


@dataclass
class ChatJob:
    """A started chat completion and what its responses need to say."""

    id: str
    created: int
    model: str
    fingerprint: str
    stream: ChatStream
    n: int
    include_usage: bool
    logprobs: bool
    echo_reasoning: str = ""  # a continued reasoning prefill, echoed as reasoning


# ---------------------------------------------------------------------------- request


def _messages(body: ChatCompletionRequest) -> list[dict[str, Any]]:
    return [m.model_dump(exclude_unset=True) for m in body.messages]


def _tools(body: ChatCompletionRequest) -> list[dict[str, Any]] | None:
    """'none' hides the tools from the template; a named choice shows only that function."""
    if not body.tools or body.tool_choice == "none":
        return None
    tools = [t.model_dump(exclude_none=True) for t in body.tools]
    choice = body.tool_choice
    if choice is not None and not isinstance(choice, str):
        tools = [t for t in tools if t["function"]["name"] == choice.function.name]
        if not tools:
            raise bad_request(
                f"Field 'tool_choice': no tool named '{choice.function.name}' in 'tools'"
            )
    return tools


def _tool_choice(body: ChatCompletionRequest) -> str | dict[str, Any] | None:
    choice = body.tool_choice
    if choice is None or isinstance(choice, str):
        return choice
    return choice.model_dump(exclude_none=True)


def _thinking(body: ChatCompletionRequest) -> bool | None:
    """chat_template_kwargs.enable_thinking wins over reasoning_effort."""
    kwargs = body.chat_template_kwargs or {}
    if isinstance(kwargs.get("enable_thinking"), bool):
        return kwargs["enable_thinking"]
    if body.reasoning_effort is None:
        return None
    return body.reasoning_effort not in ("none", "minimal")


def _budget(body: ChatCompletionRequest) -> int | None:
    field_name, value = (
        ("thinking_budget_tokens", body.thinking_budget_tokens)
        if body.thinking_budget_tokens is not None
        else ("reasoning_budget", body.reasoning_budget)
    )
    check_int_range(field_name, value, -1, INT32_MAX)
    return None if value is None or value == -1 else value


def _continue_reasoning(
    state: ServerState, messages: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], str]:
    """`continue_final_message: "reasoning_content"`: reopen the last assistant turn's
    reasoning block as its content, so the prompt ends inside the block and the model goes
    on thinking. Returns the messages to render and the reasoning being continued."""
    markers = state.require_chat().markers
    if markers is None:
        raise bad_request(
            "continue_final_message 'reasoning_content' needs a chat template with "
            "reasoning markers; this model's has none"
        )
    last = messages[-1] if messages else {}
    if last.get("role") != "assistant":
        raise bad_request("continue_final_message needs the last message to be the assistant's.")
    if last.get("content"):
        raise bad_request(
            "continue_final_message 'reasoning_content' needs the final assistant message "
            "to have no content yet"
        )
    reasoning = last.get("reasoning_content") or ""
    reopened = {"role": "assistant", "content": f"{markers.start}\n{reasoning}"}
    return [*messages[:-1], reopened], reasoning


def chat_request(
    state: ServerState, body: ChatCompletionRequest, n: int
) -> tuple[ChatRequest, str]:
    """Validate and convert; returns the engine request and any reasoning prefill to echo."""
    messages = _messages(body)
    echo_reasoning = ""
    cont = body.continue_final_message
    if cont == "reasoning_content":
        messages, reasoning = _continue_reasoning(state, messages)
        echo_reasoning = reasoning if body.echo else ""
        cont = True
    elif cont == "content":
        cont = True
    logprobs = params.check_top_logprobs(body.logprobs, body.top_logprobs)
    if body.max_completion_tokens is not None:
        max_tokens = params.token_limit(
            "max_completion_tokens", body.max_completion_tokens, state.settings.chat_answer_limit()
        )
    else:
        max_tokens = params.token_limit(
            "max_tokens", body.max_tokens, state.settings.chat_answer_limit()
        )
    request = ChatRequest(
        messages=messages,
        sampling=params.sampling_of(state, body),
        max_tokens=max_tokens,
        stop=params.stop_strings(state, body.stop),
        n=n,
        tools=_tools(body),
        tool_choice=_tool_choice(body),
        parallel_tool_calls=body.parallel_tool_calls is not False,
        template_kwargs=dict(body.chat_template_kwargs or {}),
        add_generation_prompt=body.add_generation_prompt,
        continue_final_message=cont,
        echo=body.echo and body.continue_final_message != "reasoning_content",
        logprobs=logprobs,
        enable_thinking=_thinking(body),
        reasoning_budget=_budget(body),
        reasoning_format=body.reasoning_format,
        cache_prompt=body.cache_prompt,
        ignore_eos=body.ignore_eos,
        report_progress=body.return_progress and body.stream,
    )
    return request, echo_reasoning


def start(state: ServerState, body: ChatCompletionRequest) -> ChatJob:
    """Check, render and submit; every 4xx is raised here, before any byte is sent."""
    model = check_model(state, body.model)
    n = params.choice_count(state, body)
    request, echo_reasoning = chat_request(state, body, n)
    stream = start_chat(state, request)
    job = ChatJob(
        id=new_id("chatcmpl-"),
        created=now(),
        model=model,
        fingerprint=params.fingerprint(),
        stream=stream,
        n=n,
        include_usage=bool(body.stream_options and body.stream_options.include_usage),
        logprobs=request.logprobs is not None,
        echo_reasoning=echo_reasoning,
    )
    if body.reasoning_control:
        _controllable.add(stream)
    state.register(job.id, stream)
    state.metrics.completions += 1
    return job


def finish(state: ServerState, job: ChatJob) -> None:
    """Stop generating (if still going) and forget the live completion."""
    job.stream.cancel()
    state.unregister(job.id, job.stream)


# ---------------------------------------------------------------------------- events


async def events(
    state: ServerState, job: ChatJob
) -> AsyncIterator[tuple[ChatEvent, list[dict[str, Any]]]]:
    """Chat events, each with the logprobs of the tokens consumed since the choice's previous
    event (tokens held back by the output parser attach to the event that releases them)."""
    for i in range(job.n if job.echo_reasoning else 0):
        yield ReasoningDelta(job.echo_reasoning, i), []
    if not job.logprobs:
        async for event in job.stream:
            yield event, []
        return
    # ChatStream drops the engine's per-token logprobs, so read its raw stream and translate.
    token_bytes = state.require_text_engine().model.token_bytes
    pending: dict[int, list[dict[str, Any]]] = defaultdict(list)
    async for raw in job.stream.raw:
        if isinstance(raw, TextDelta):
            pending[raw.index].extend(
                params.logprob_entry(chosen, top, lambda t: token_bytes(t, special=True))
                for chosen, top in raw.logprobs
            )
        for event in job.stream.translate(raw):
            yield event, pending.pop(event.index, [])


@dataclass
class ChoiceResult:
    """One choice, assembled for a non-streamed response."""

    content: str = ""
    reasoning: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    logprobs: list[dict[str, Any]] = field(default_factory=list)
    done: Done | None = None


# ---------------------------------------------------------------------------- non-stream


async def complete(state: ServerState, job: ChatJob, request: Request) -> dict[str, Any]:
    """Run to the end and answer one `chat.completion` (the client leaving cancels it)."""
    results = [ChoiceResult() for _ in range(job.n)]
    try:
        async with cancel_on_disconnect(request, job.stream.cancel):
            async for event, logprobs in events(state, job):
                r = results[event.index]
                r.logprobs.extend(logprobs)
                if isinstance(event, ReasoningDelta):
                    r.reasoning += event.text
                elif isinstance(event, ContentDelta):
                    r.content += event.text
                elif isinstance(event, ToolCallDelta):
                    r.tool_calls.append(_tool_call(event))
                elif isinstance(event, Done):
                    r.done = event
    finally:
        finish(state, job)
    dones = [r.done for r in results if r.done is not None]
    return {
        "id": job.id,
        "object": "chat.completion",
        "created": job.created,
        "model": job.model,
        "system_fingerprint": job.fingerprint,
        "choices": [_choice(i, r, job.logprobs) for i, r in enumerate(results)],
        "usage": params.usage_of([dones]),
        "timings": params.timings_of([dones]),
    }


def _choice(index: int, r: ChoiceResult, logprobs: bool) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": "assistant",
        "content": r.content if r.content or not r.tool_calls else None,
    }
    if r.reasoning:
        message["reasoning_content"] = r.reasoning
    if r.tool_calls:
        message["tool_calls"] = r.tool_calls
    assert r.done is not None
    return {
        "index": index,
        "message": message,
        "logprobs": {"content": r.logprobs} if logprobs else None,
        "finish_reason": params.finish_reason(r.done, bool(r.tool_calls)),
    }


def _tool_call(event: ToolCallDelta) -> dict[str, Any]:
    return {
        "id": event.id,
        "type": "function",
        "function": {"name": event.name, "arguments": event.arguments},
    }


# ---------------------------------------------------------------------------- stream


async def stream_frames(state: ServerState, job: ChatJob) -> AsyncIterator[str]:
    """`data:` events: a role chunk per choice, deltas, a finish chunk per choice, the usage
    chunk when asked, `[DONE]`. An error mid-stream is one `data: {"error": …}` and the end."""
    try:
        for i in range(job.n):  # one choice per chunk, as OpenAI streams n > 1
            yield data_frame(
                _chunk(job, [_chunk_choice(i, {"role": "assistant", "content": None})])
            )
        dones: list[Done] = []
        called_tools: set[int] = set()
        async for event, logprobs in events(state, job):
            lp = {"content": logprobs} if job.logprobs else None
            if isinstance(event, PromptProgress):
                opening = _chunk_choice(0, {"role": "assistant", "content": None})
                yield data_frame(_chunk(job, [opening], prompt_progress=progress_of(event)))
                continue
            if isinstance(event, Done):
                dones.append(event)
                reason = params.finish_reason(event, event.index in called_tools)
                choice = _chunk_choice(event.index, {}, lp, reason)
                timings = params.timings_of([[event]])
                yield data_frame(_chunk(job, [choice], timings=timings))
                continue
            if isinstance(event, ToolCallDelta):
                called_tools.add(event.index)
                delta: dict[str, Any] = {
                    "tool_calls": [{"index": event.call_index, **_tool_call(event)}]
                }
            elif isinstance(event, ReasoningDelta):
                delta = {"reasoning_content": event.text}
            else:
                delta = {"content": event.text}
            yield data_frame(_chunk(job, [_chunk_choice(event.index, delta, lp)]))
        if job.include_usage:
            yield data_frame(
                _chunk(job, [], usage=params.usage_of([dones]), timings=params.timings_of([dones]))
            )
        yield DONE
    except Exception as exc:  # after the first byte, errors travel in the stream
        yield openai_error_frame(exc)
    finally:
        finish(state, job)


def _chunk(job: ChatJob, choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    chunk: dict[str, Any] = {
        "id": job.id,
        "object": "chat.completion.chunk",
        "created": job.created,
        "model": job.model,
        "system_fingerprint": job.fingerprint,
        "choices": choices,
    }
    if job.include_usage:
        chunk["usage"] = None
    chunk.update(extra)
    return chunk


def _chunk_choice(
    index: int,
    delta: dict[str, Any],
    logprobs: dict[str, Any] | None = None,
    finish_reason: str | None = None,
) -> dict[str, Any]:
    return {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}


# ---------------------------------------------------------------------------- control


def control(state: ServerState, completion_id: str | None, action: str | None) -> dict[str, Any]:
    """§9, with one extension: with `n` > 1 every choice's reasoning ends (llama-server ends
    only the first slot it finds)."""
    if not completion_id:
        raise bad_request("missing completion id")
    if action != "reasoning_end":
        raise bad_request("unknown control action")
    streams = [s for s in state.live(completion_id) if not s.raw.finished]
    if not streams:
        return {"success": False, "message": "no active completion for this id"}
    allowed = [s for s in streams if is_controllable(s)]
    if not allowed:
        return {"success": False, "message": "reasoning control not enabled for this completion"}
    # A completion whose template has no reasoning block has nothing to end: done, as
    # llama-server answers it.
    ended = [s.end_reasoning() for s in allowed if s.reasoning_enabled]
    if all(s.raw.finished for s in allowed) and not any(ended):
        return {"success": False, "message": "no active completion for this id"}
    return {"success": True}


def allow_control(stream: ChatStream) -> None:
    """Let the control endpoint end this stream's reasoning (realtime responses always do)."""
    _controllable.add(stream)
