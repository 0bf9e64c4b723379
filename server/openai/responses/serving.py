"""Running a Responses request: prepare the chat, generate, and answer as one JSON object or
as the typed event stream; store the result so later requests can build on it."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, StreamingResponse

from llamactl import (
    RESPONSE_ID_HEADER,
    ChatRequest,
    ChatStream,
    Done,
    PromptProgress,
    SamplingParams,
)

from ...common import (
    INT32_MAX,
    check_int_range,
    check_model,
    now,
    ping_interval,
    progress_of,
    render_chat,
    sampling_params,
    server_state,
    start_chat,
)
from ...disconnect import cancel_on_disconnect
from ...errors import APIError, bad_request
from ...limits import limits_of
from ...prepare import off_loop
from ...sse import event_frame, sse_response
from ...state import ServerState
from ...stream_errors import responses_error, responses_error_event
from .convert import (
    Item,
    Tools,
    convert_tools,
    items_to_messages,
    resolve_items,
    text_echo,
    text_grammar,
    thinking,
)
from .output import Event, OutputBuilder, make_id
from .protocol import RESOLVED_ITEM, InputTokensRequest, ResponseInputFields, ResponsesRequest
from .store import ResponseStore, StoredResponse, response_store

log = logging.getLogger("llamactl.server")

# Tool-call options reach the chat layer once it takes them (another part of the tree).


# ------------------------------------------------------------------------ preparation


@dataclass
class ResponseInput:
    messages: list[dict[str, Any]]  # what the template renders, instructions first
    history: list[Item]  # the conversation as items (no instructions), for the store
    tools: Tools
    template_kwargs: dict[str, Any]
    enable_thinking: bool | None
    reasoning_budget: int | None


def resolve_input(body: ResponseInputFields, store: ResponseStore) -> ResponseInput:
    """Previous response + this input → chat messages; the tools and thinking switch."""
    history: list[Item] = []
    if body.previous_response_id is not None:
        previous = store.get(body.previous_response_id)
        if previous is None:
            raise APIError(
                404,
                f"Field 'previous_response_id': no stored response '{body.previous_response_id}'"
                " (responses are kept in memory, the most recent ones only, unless store=false)",
                "invalid_request_error",
            )
        history = list(previous.items)
    offset = len(history)
    given: list[Any] = body.input if isinstance(body.input, list) else []
    if isinstance(body.input, str):
        history.append(RESOLVED_ITEM.validate_python({"role": "user", "content": body.input}))
    history += resolve_items(given, store.find_item)
    messages = items_to_messages(history, offset)
    if body.instructions:
        messages.insert(0, {"role": "system", "content": body.instructions})
    if not messages:
        raise bad_request("Field 'input': there is nothing to answer (no messages)")
    think = thinking(body.reasoning)
    kwargs = {**think.template_kwargs, **(body.chat_template_kwargs or {})}
    return ResponseInput(
        messages=messages,
        history=history,
        tools=convert_tools(body.tools, body.tool_choice),
        template_kwargs=kwargs,
        enable_thinking=think.enable,
        reasoning_budget=think.budget,
    )


def sampling(state: ServerState, body: ResponsesRequest) -> SamplingParams:
    return sampling_params(
        state,
        temperature=body.temperature,
        top_p=body.top_p,
        top_k=body.top_k,
        min_p=body.min_p,
        seed=body.seed,
        presence_penalty=body.presence_penalty,
        frequency_penalty=body.frequency_penalty,
        repeat_penalty=body.repeat_penalty,
        grammar=text_grammar(body.text, limits_of(state.settings)),
    )


def echo(state: ServerState, body: ResponsesRequest, conv: ResponseInput, params: SamplingParams):
    """The request parameters a response object repeats back (OpenAI's shape)."""
    reasoning = body.reasoning
    return {
        "instructions": body.instructions,
        "max_output_tokens": body.max_output_tokens,
        "model": body.model or state.model_id,  # the one rule: server/common.py check_model
        "parallel_tool_calls": body.parallel_tool_calls is not False,
        "previous_response_id": body.previous_response_id,
        "reasoning": {
            "effort": reasoning.effort if reasoning else None,
            "summary": reasoning.summary if reasoning else None,
        },
        "store": body.store is not False,
        "temperature": params.temperature,
        "text": text_echo(body.text),
        "tool_choice": conv.tools.choice,
        "tools": conv.tools.echo,
        "top_p": params.top_p,
        "truncation": body.truncation or "disabled",
        "user": body.user,
        "metadata": body.metadata or {},
        "background": False,
    }


def prompt_request(conv: ResponseInput, parallel_tool_calls: bool | None) -> ChatRequest:
    """The prompt side of the chat request: what input_tokens renders and create extends."""
    options: dict[str, Any] = {}
    if conv.tools.chat:
        options["tool_choice"] = conv.tools.chat_choice
    if parallel_tool_calls is not None:
        options["parallel_tool_calls"] = parallel_tool_calls
    return ChatRequest(
        messages=conv.messages,
        tools=conv.tools.chat,
        template_kwargs=conv.template_kwargs,
        enable_thinking=conv.enable_thinking,
        reasoning_budget=conv.reasoning_budget,
        **options,
    )


def check_request(body: ResponsesRequest) -> None:
    check_int_range("max_output_tokens", body.max_output_tokens, 1, INT32_MAX)
    if body.background:
        raise bad_request("Field 'background': background responses are not supported")


# ---------------------------------------------------------------------------- running


class ResponseRun:
    """One response being generated: its id, the output builder, and the final object."""

    def __init__(
        self,
        state: ServerState,
        stream: ChatStream,
        conv: ResponseInput,
        echo_fields: dict[str, Any],
        store: ResponseStore | None,
    ) -> None:
        self.state = state
        self.stream = stream
        self.conv = conv
        self.echo = echo_fields
        self.store = store
        self.id = make_id("resp_")
        self.created_at = now()
        self.builder = OutputBuilder(parallel_tool_calls=echo_fields["parallel_tool_calls"])
        self._seq = 0

    def response(
        self,
        status: str,
        *,
        usage: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
        out: dict[str, Any] = {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
        }
        out["completed_at"] = now() if status == "completed" else None
        out.update(error=error, incomplete_details=incomplete)
        out.update(self.echo)
        out["output"] = [] if status == "in_progress" else self.builder.output
        out["usage"] = usage
        return out

    def finish(self, done: Done) -> dict[str, Any]:
        """The final response object; stored when the request allows it."""
        status = "incomplete" if self.builder.truncated else "completed"
        final = self.response(status, usage=self.usage(done))
        if self.store is not None:
            items = tuple(self.conv.history) + tuple(
                RESOLVED_ITEM.validate_python(item) for item in self.builder.output
            )
            self.store.put(StoredResponse(final, items))
        return final

    def usage(self, done: Done) -> dict[str, Any]:
        u = done.usage
        reasoning = u.reasoning_tokens
        return {
            "input_tokens": u.prompt_tokens,
            "input_tokens_details": {"cached_tokens": u.cached_tokens},
            "output_tokens": u.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": min(reasoning, u.completion_tokens)},
            "total_tokens": u.prompt_tokens + u.completion_tokens,
        }

    # ----------------------------------------------------------------------- non-stream
    async def collect(self, request: Request) -> dict[str, Any]:
        done: Done | None = None
        async with cancel_on_disconnect(request, self.stream.cancel):
            async for event in self.stream:
                if event.index != 0:
                    continue
                self.builder.feed(event)
                if isinstance(event, Done):
                    done = event
        if done is None or done.finish_reason in ("error", "cancelled"):
            reason = done.finish_reason if done else "no result"
            raise APIError(500, f"generation ended without an answer ({reason})")
        final = self.finish(done)
        final["timings"] = done.timings.as_dict()
        return final

    # --------------------------------------------------------------------------- stream
    def frame(self, event: Event) -> str:
        name = event["type"]
        data = {"type": name, "sequence_number": self._seq, **event}
        self._seq += 1
        return event_frame(name, data)

    async def frames(self) -> AsyncIterator[str]:
        yield self.frame({"type": "response.created", "response": self.response("in_progress")})
        yield self.frame({"type": "response.in_progress", "response": self.response("in_progress")})
        try:
            async for event in self.stream:
                if event.index != 0:
                    continue
                if isinstance(event, PromptProgress):
                    progress = {"prompt_progress": progress_of(event)}
                    response = self.response("in_progress")
                    yield self.frame(
                        {"type": "response.in_progress", "response": response, **progress}
                    )
                    continue
                for out in self.builder.feed(event):
                    yield self.frame(out)
                if isinstance(event, Done):
                    if event.finish_reason in ("error", "cancelled"):
                        raise RuntimeError(f"generation ended early ({event.finish_reason})")
                    final = self.finish(event)
                    kind = f"response.{final['status']}"
                    timings = event.timings.as_dict()
                    yield self.frame({"type": kind, "response": final, "timings": timings})
                    return
            raise RuntimeError("the generation ended without a result")
        except Exception as exc:  # after the headers, errors are events (spec §8)
            log.warning("responses: stream %s failed: %s", self.id, exc)
            yield self.frame(responses_error_event(exc))
            failed = self.response("failed", error=responses_error(exc))
            yield self.frame({"type": "response.failed", "response": failed})


# ---------------------------------------------------------------------------- entries


async def create_response(request: Request, body: ResponsesRequest) -> Any:
    state = server_state(request)
    check_model(state, body.model)
    check_request(body)
    store = response_store(request.app)
    interval = ping_interval(state, body.sse_ping_interval) if body.stream else None
    stream, conv, params = await off_loop(
        _start, state, body, store, abandon=lambda started: started[0].cancel()
    )
    keep = store if body.store is not False else None
    run = ResponseRun(state, stream, conv, echo(state, body, conv, params), keep)
    if body.stream:
        return _sse(run, interval)
    return JSONResponse(await run.collect(request), headers=_id_header(run))


def _start(
    state: ServerState, body: ResponsesRequest, store: ResponseStore
) -> tuple[ChatStream, ResponseInput, SamplingParams]:
    """Convert, render, tokenise and submit (in a preparation worker)."""
    conv = resolve_input(body, store)
    params = sampling(state, body)
    chat = prompt_request(conv, body.parallel_tool_calls)
    chat.sampling = params
    # absent: the server's chat default (the max_tokens setting, else a bounded answer)
    chat.max_tokens = (
        state.settings.chat_answer_limit()
        if body.max_output_tokens is None
        else body.max_output_tokens
    )
    chat.report_progress = body.return_progress and body.stream
    return start_chat(state, chat, messages_field="input"), conv, params


def _sse(run: ResponseRun, interval: float | None) -> StreamingResponse:
    return sse_response(
        run.frames(), ping_interval=interval, on_close=run.stream.cancel, headers=_id_header(run)
    )


def _id_header(run: ResponseRun) -> dict[str, str]:
    """The response's id as a header, sent before the body: a load balancer reads it to send
    the requests that name it as `previous_response_id` to the replica that stored it (the
    body of a stream comes too late for that). See docs/scale.md."""
    return {RESPONSE_ID_HEADER: run.id}


def count_input_tokens(request: Request, body: InputTokensRequest) -> dict[str, Any]:
    state = server_state(request)
    check_model(state, body.model)
    conv = resolve_input(body, response_store(request.app))
    chat = prompt_request(conv, body.parallel_tool_calls)
    rendered = render_chat(state, chat, messages_field="input")
    return {"object": "response.input_tokens", "input_tokens": len(rendered.tokens)}


def stored(request: Request, response_id: str) -> StoredResponse:
    server_state(request)
    entry = response_store(request.app).get(response_id)
    if entry is None:
        raise APIError(404, f"Response with id '{response_id}' not found.")
    return entry


def delete_response(request: Request, response_id: str) -> dict[str, Any]:
    server_state(request)
    if not response_store(request.app).delete(response_id):
        raise APIError(404, f"Response with id '{response_id}' not found.")
    return {"id": response_id, "object": "response.deleted", "deleted": True}
