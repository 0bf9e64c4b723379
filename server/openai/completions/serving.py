"""Text completions on the engine: each prompt is one engine request with `n` choices; the
choices of all prompts are numbered `prompt index × n + choice`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request

from llamactl import (
    Done,
    Event,
    GenerationRequest,
    GenerationStream,
    LlamactlError,
    PromptProgress,
    TextDelta,
)

from ...common import check_int_range, check_model, new_id, now
from ...disconnect import cancel_on_disconnect
from ...errors import bad_request, from_engine_error
from ..chat import params
from ...sse import DONE, data_frame
from ...state import ServerState
from ...stream_errors import openai_error_frame
from .protocol import CompletionRequest


@dataclass
class CompletionJob:
    id: str
    created: int
    model: str
    fingerprint: str
    streams: list[GenerationStream]
    n: int
    include_usage: bool
    logprobs: bool

    def cancel(self) -> None:
        for stream in self.streams:
            stream.cancel()


def _prompts(state: ServerState, prompt: Any) -> list[list[int]]:
    """Every accepted prompt form → token lists (strings are tokenized with BOS)."""
    if isinstance(prompt, str) or (prompt and isinstance(prompt[0], int)):
        prompt = [prompt]
    if not prompt:
        raise bad_request("Field 'prompt': must not be empty")
    model = state.require_text_engine().model
    out = []
    for i, p in enumerate(prompt):
        tokens = model.tokenize(p, add_special=True) if isinstance(p, str) else list(p)
        if not tokens:
            raise bad_request(f"Field 'prompt.{i}': must not be empty")
        out.append(tokens)
    return out


def start(state: ServerState, body: CompletionRequest) -> CompletionJob:
    """Validate and submit every prompt; all 4xx happen here, before any byte is sent."""
    model = check_model(state, body.model)
    if body.echo:
        raise bad_request("Only no echo is supported")
    if body.suffix:
        raise bad_request("Field 'suffix': fill-in-the-middle is not supported")
    n = params.choice_count(state, body)
    if body.logprobs is not None:
        check_int_range("logprobs", body.logprobs, 0, params.MAX_TOP_LOGPROBS)
    sampling = params.sampling_of(state, body)
    max_tokens = params.token_limit("max_tokens", body.max_tokens, state.settings.max_tokens)
    stop = params.stop_strings(state, body.stop)
    streams: list[GenerationStream] = []
    try:
        for tokens in _prompts(state, body.prompt):
            request = GenerationRequest(
                prompt=tokens,
                sampling=sampling,
                max_tokens=max_tokens,
                stop=stop,
                n=n,
                logprobs=body.logprobs,
                cache_prompt=body.cache_prompt,
            )
            streams.append(state.require_text_engine().submit(request))
    except LlamactlError as exc:
        for stream in streams:
            stream.cancel()
        raise from_engine_error(exc) from exc
    except Exception:
        for stream in streams:
            stream.cancel()
        raise
    state.metrics.completions += 1
    return CompletionJob(
        id=new_id("cmpl-"),
        created=now(),
        model=model,
        fingerprint=params.fingerprint(),
        streams=streams,
        n=n,
        include_usage=bool(body.stream_options and body.stream_options.include_usage),
        logprobs=body.logprobs is not None,
    )


async def merged(streams: list[GenerationStream]) -> AsyncIterator[tuple[int, Event]]:
    """Events of several streams as they come, tagged with the stream's position."""
    if len(streams) == 1:
        async for event in streams[0]:
            yield 0, event
        return
    queue: asyncio.Queue[tuple[int, Event | BaseException | None]] = asyncio.Queue()

    async def pump(k: int, stream: GenerationStream) -> None:
        try:
            async for event in stream:
                queue.put_nowait((k, event))
        except Exception as exc:
            queue.put_nowait((k, exc))
        finally:
            queue.put_nowait((k, None))

    tasks = [asyncio.ensure_future(pump(k, s)) for k, s in enumerate(streams)]
    try:
        open_streams = len(streams)
        while open_streams:
            k, item = await queue.get()
            if item is None:
                open_streams -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield k, item
    finally:
        for task in tasks:
            task.cancel()


# ---------------------------------------------------------------------------- logprobs


@dataclass
class LegacyLogprobs:
    """OpenAI's legacy logprobs lists of one choice; `offset` runs over the choice's text."""

    tokens: list[str] = field(default_factory=list)
    token_logprobs: list[float] = field(default_factory=list)
    top_logprobs: list[dict[str, float]] = field(default_factory=list)
    text_offset: list[int] = field(default_factory=list)
    offset: int = 0

    def add(self, delta: TextDelta) -> None:
        for chosen, top in delta.logprobs:
            self.tokens.append(chosen.text)
            self.token_logprobs.append(chosen.logprob)
            self.top_logprobs.append({t.text: t.logprob for t in top})
            self.text_offset.append(self.offset)
            self.offset += len(chosen.text)

    def as_dict(self) -> dict[str, Any]:
        return {
            "tokens": self.tokens,
            "token_logprobs": self.token_logprobs,
            "top_logprobs": self.top_logprobs,
            "text_offset": self.text_offset,
        }

    def take(self) -> dict[str, Any]:
        """The entries gathered since the last take (a stream chunk's share)."""
        out = self.as_dict()
        self.tokens, self.token_logprobs, self.top_logprobs, self.text_offset = [], [], [], []
        return out


# ---------------------------------------------------------------------------- responses


def _envelope(job: CompletionJob, choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": job.id,
        "object": "text_completion",
        "created": job.created,
        "model": job.model,
        "system_fingerprint": job.fingerprint,
        "choices": choices,
    }
    out.update(extra)
    return out


def _groups(job: CompletionJob, dones: dict[int, Done]) -> list[list[Done]]:
    """Done events per prompt, for usage (each prompt counts once)."""
    return [
        [d for i, d in sorted(dones.items()) if i // job.n == k] for k in range(len(job.streams))
    ]


async def complete(job: CompletionJob, request: Request) -> dict[str, Any]:
    """Run every prompt to the end (the client leaving cancels them) and answer at once."""
    total = len(job.streams) * job.n
    texts = [""] * total
    logprobs = [LegacyLogprobs() for _ in range(total)]
    dones: dict[int, Done] = {}
    try:
        async with cancel_on_disconnect(request, job.cancel):
            async for k, event in merged(job.streams):
                i = k * job.n + event.index
                if isinstance(event, Done):
                    dones[i] = event
                    continue
                if isinstance(event, PromptProgress):
                    continue  # never asked for here
                texts[i] += event.text
                logprobs[i].add(event)
    finally:
        job.cancel()
    groups = _groups(job, dones)
    choices = [
        {
            "index": i,
            "text": texts[i],
            "logprobs": logprobs[i].as_dict() if job.logprobs else None,
            "finish_reason": params.finish_reason(dones[i]) if i in dones else "stop",
        }
        for i in range(total)
    ]
    return _envelope(job, choices, usage=params.usage_of(groups), timings=params.timings_of(groups))


async def stream_frames(job: CompletionJob) -> AsyncIterator[str]:
    """A chunk per text delta, a finish chunk per choice (with its timings), the usage chunk
    when asked, then `[DONE]`; an error mid-stream is one `data: {"error": …}` and the end."""
    total = len(job.streams) * job.n
    logprobs = [LegacyLogprobs() for _ in range(total)]
    dones: dict[int, Done] = {}
    try:
        async for k, event in merged(job.streams):
            i = k * job.n + event.index
            lp = logprobs[i]
            if isinstance(event, Done):
                dones[i] = event
                choice = _choice(i, "", lp.take() if job.logprobs else None)
                choice["finish_reason"] = params.finish_reason(event)
                yield data_frame(_envelope(job, [choice], timings=event.timings.as_dict()))
                continue
            if isinstance(event, PromptProgress):
                continue  # never asked for here
            lp.add(event)
            if event.text:
                chunk = _envelope(
                    job, [_choice(i, event.text, lp.take() if job.logprobs else None)]
                )
                yield data_frame(chunk)
        if job.include_usage:
            groups = _groups(job, dones)
            yield data_frame(
                _envelope(job, [], usage=params.usage_of(groups), timings=params.timings_of(groups))
            )
        yield DONE
    except Exception as exc:  # after the first byte, errors travel in the stream
        yield openai_error_frame(exc)
    finally:
        job.cancel()


def _choice(index: int, text: str, logprobs: dict[str, Any] | None) -> dict[str, Any]:
    return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": None}
