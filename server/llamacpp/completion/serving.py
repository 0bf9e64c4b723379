"""Native completions on the engine: prompts → engine requests, events → llama-server's
result objects (`content`, `tokens`, `stop_type`, `timings`, `completion_probabilities`...)."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from llamactl import (
    Done,
    Engine,
    GenerationRequest,
    GenerationStream,
    LlamactlError,
    PromptProgress,
    TextDelta,
    TokenLogprob,
    json_schema_grammar,
)

from ...common import check_int_range, check_model, progress_of
from ...disconnect import cancel_on_disconnect
from ...errors import bad_request, from_engine_error
from ...limits import limits_of
from ...openai.chat import params
from ...openai.completions.serving import merged
from ...sse import data_frame, sse_response
from ...state import ServerState
from ...stream_errors import openai_error_frame
from ..generation_params import generation_params
from ..tokens.serving import prompts_of
from .protocol import NativeCompletionRequest
from .repetition import with_repetition_fields

__all__ = ["NativeJob", "complete", "start", "start_prompts", "stream_frames"]

MAX_N_PROBS = 20


@dataclass
class NativeJob:
    model: str
    request: NativeCompletionRequest
    engine: Engine
    prompts: list[list[int]]
    generation: list[GenerationRequest]
    streams: list[GenerationStream]
    n: int
    listed: bool  # the prompt was a list of prompts: answer a list

    def cancel(self) -> None:
        for stream in self.streams:
            stream.cancel()


def _grammar(state: ServerState, body: NativeCompletionRequest) -> str | None:
    if body.json_schema is None:
        return None
    if body.grammar or body.response_format is not None:
        raise bad_request(
            "Field 'json_schema': cannot be combined with 'grammar' or 'response_format'"
        )
    limits_of(state.settings).check_schema(body.json_schema, "json_schema")
    return json_schema_grammar(body.json_schema)


def start(state: ServerState, body: NativeCompletionRequest) -> NativeJob:
    """Validate and submit every prompt; all 4xx happen here, before any byte is sent."""
    prompts, listed = prompts_of(state.require_text_engine().model, body.prompt)
    return start_prompts(state, body, prompts, listed)


def start_prompts(
    state: ServerState, body: NativeCompletionRequest, prompts: list[list[int]], listed: bool
) -> NativeJob:
    """`start` for prompts already tokenized (`/infill` builds its own); `body.prompt` is
    then not read."""
    model = check_model(state, body.model)
    engine = state.require_text_engine()
    n = params.choice_count(state, body)
    check_int_range("n_probs", body.n_probs, 0, MAX_N_PROBS)
    sampling = with_repetition_fields(params.sampling_of(state, body), body)
    grammar = _grammar(state, body)
    if grammar is not None:
        sampling = dataclasses.replace(sampling, grammar=grammar)
    field_name, value = (
        ("n_predict", body.n_predict)
        if body.n_predict is not None
        else ("max_tokens", body.max_tokens)
    )
    max_tokens = params.token_limit(field_name, value, state.settings.max_tokens)
    stop = params.stop_strings(state, body.stop)
    slot = _slot_of(body.id_slot, engine.config.n_parallel)
    generation = [
        GenerationRequest(
            prompt=tokens,
            sampling=sampling,
            max_tokens=max_tokens,
            stop=stop,
            n=n,
            logprobs=body.n_probs or None,
            cache_prompt=body.cache_prompt,
            ignore_eos=body.ignore_eos,
            slot=slot,
            report_progress=body.return_progress and body.stream,
            n_cache_reuse=body.n_cache_reuse,
        )
        for tokens in prompts
    ]
    streams: list[GenerationStream] = []
    try:
        for request in generation:
            streams.append(engine.submit(request))
    except LlamactlError as exc:
        for stream in streams:
            stream.cancel()
        raise from_engine_error(exc) from exc
    state.metrics.completions += 1
    return NativeJob(model, body, engine, prompts, generation, streams, n, listed)


def _slot_of(id_slot: int, n_slots: int) -> int | None:
    """llama-server's `id_slot`: -1 any slot; an id past the last slot wraps around."""
    if id_slot == -1:
        return None
    if id_slot < 0:
        raise bad_request("Invalid slot ID")
    return id_slot % n_slots


@dataclass
class _Result:
    """One completion (prompt × choice) as it is built."""

    content: str = ""
    tokens: list[int] = field(default_factory=list)
    probs: list[dict[str, Any]] = field(default_factory=list)
    done: Done | None = None


def _prob(engine: Engine, t: TokenLogprob) -> dict[str, Any]:
    return {
        "id": t.token,
        "token": t.text,
        "logprob": t.logprob,
        "bytes": list(engine.model.token_bytes(t.token, special=True)),
    }


def _probs(engine: Engine, delta: TextDelta) -> list[dict[str, Any]]:
    return [
        _prob(engine, chosen) | {"top_logprobs": [_prob(engine, t) for t in top]}
        for chosen, top in delta.logprobs
    ]


def _stop_type(done: Done) -> str:
    if done.finish_reason == "length":
        return "limit"
    if done.finish_reason == "stop":
        return "word" if done.stop_string else "eos"
    return "none"


def _slot_id(job: NativeJob, k: int) -> int:
    """The slot prompt `k`'s first choice ran in (-1 before it was admitted)."""
    slot = job.streams[k].slot_id
    return -1 if slot is None else slot


def _final(job: NativeJob, i: int, r: _Result) -> dict[str, Any]:
    k = i // job.n
    done = r.done
    request = job.generation[k]
    out: dict[str, Any] = {
        "index": i,
        "content": r.content,
        # every generated token, the end-of-generation one included (as llama-server)
        "tokens": (list(done.token_ids) if done else r.tokens) if job.request.return_tokens else [],
        "id_slot": _slot_id(job, k),
        "stop": True,
        "model": job.model,
        "tokens_predicted": done.usage.completion_tokens if done else len(r.tokens),
        "tokens_evaluated": len(job.prompts[k]),
        "generation_settings": generation_params(
            request.sampling,
            request.max_tokens,
            job.engine.model.eog_tokens if request.ignore_eos else (),
        ),
        "prompt": job.engine.model.detokenize(job.prompts[k], special=True),
        "has_new_line": "\n" in r.content,
        "truncated": False,
        "stop_type": _stop_type(done) if done else "none",
        "stopping_word": (done.stop_string or "") if done else "",
        "tokens_cached": done.usage.cached_tokens if done else 0,
        "timings": done.timings.as_dict() if done else {},
    }
    if job.request.n_probs and not job.request.stream:
        out["completion_probabilities"] = r.probs
    return out


async def respond(job: NativeJob, request: Request, pings: float | None) -> Response:
    """The answer to a started job, as its request asked: a stream, or the whole at once."""
    if job.request.stream:
        return sse_response(stream_frames(job), ping_interval=pings, on_close=job.cancel)
    return JSONResponse(await complete(job, request))


async def complete(job: NativeJob, request: Request) -> dict[str, Any] | list[dict[str, Any]]:
    """Every completion to its end (the client leaving cancels them), answered at once."""
    results = [_Result() for _ in range(len(job.streams) * job.n)]
    try:
        async with cancel_on_disconnect(request, job.cancel):
            async for k, event in merged(job.streams):
                r = results[k * job.n + event.index]
                if isinstance(event, Done):
                    r.done = event
                    continue
                if isinstance(event, PromptProgress):
                    continue  # asked for in streams only
                r.content += event.text
                r.tokens += event.token_ids
                if job.request.n_probs:
                    r.probs += _probs(job.engine, event)
    finally:
        job.cancel()
    answers = [_final(job, i, r) for i, r in enumerate(results)]
    return answers if job.listed or len(answers) > 1 else answers[0]


async def stream_frames(job: NativeJob) -> AsyncIterator[str]:
    """A `data:` object per text delta (`stop: false`), then each completion's final object
    (`stop: true`); no `[DONE]`, as llama-server's native stream ends."""
    results = [_Result() for _ in range(len(job.streams) * job.n)]
    try:
        async for k, event in merged(job.streams):
            i = k * job.n + event.index
            r = results[i]
            if isinstance(event, Done):
                r.done = event
                final = _final(job, i, r)
                final["content"], final["tokens"] = "", []  # sent in the partial chunks
                yield data_frame(final)
                continue
            if isinstance(event, PromptProgress):
                yield data_frame(
                    {
                        "index": i,
                        "content": "",
                        "tokens": [],
                        "stop": False,
                        "id_slot": _slot_id(job, k),
                        "tokens_predicted": 0,
                        "tokens_evaluated": event.total,
                        "prompt_progress": progress_of(event),
                    }
                )
                continue
            r.content += event.text
            r.tokens += event.token_ids
            chunk: dict[str, Any] = {
                "index": i,
                "content": event.text,
                "tokens": list(event.token_ids) if job.request.return_tokens else [],
                "stop": False,
                "id_slot": _slot_id(job, k),
                "tokens_predicted": len(r.tokens),
                "tokens_evaluated": len(job.prompts[k]),
            }
            if job.request.n_probs:
                chunk["completion_probabilities"] = _probs(job.engine, event)
            yield data_frame(chunk)
    except Exception as exc:  # after the first byte, errors travel in the stream
        yield openai_error_frame(exc)
    finally:
        job.cancel()
