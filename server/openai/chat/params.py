"""Request fields → engine parameters, and engine results → OpenAI's usage, timings, logprobs.

Shared by chat completions and text completions so both validate and report the same way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from llamactl import Done, LlamactlError, SamplingParams, Timings, TokenLogprob

from ...common import (
    INT32_MAX,
    check_int_range,
    response_format_grammar,
    sampling_params,
    total_usage,
)
from ...errors import bad_request, from_engine_error
from ...limits import limits_of
from ...state import ServerState
from ...version import server_version
from .protocol import SamplingFields

MAX_TOP_LOGPROBS = 20


def choice_count(state: ServerState, body: SamplingFields) -> int:
    """`n` (or llama-server's `n_cmpl`), 1..slots; the error names the field that was sent."""
    field, value = ("n_cmpl", body.n_cmpl) if body.n_cmpl is not None else ("n", body.n)
    if value is None:
        return 1
    check_int_range(field, value, 1, state.require_text_engine().config.n_parallel)
    return value


def token_limit(field: str, value: int | None, default: int | None) -> int | None:
    """-1 means no limit (llama-server's n_predict); otherwise at least one token."""
    if value is None:
        return default
    if value == -1:
        return None
    if not 1 <= value <= INT32_MAX:
        raise bad_request(
            f"Field '{field}': Value must be -1 (no limit) or between 1 <= value <= "
            f"{INT32_MAX}, but got {value}"
        )
    return value


def stop_strings(state: ServerState, stop: str | list[str] | None) -> tuple[str, ...]:
    """Stop strings within the server's limits (OpenAI allows 4, llama-server any number:
    docs/serve.md, Limits); empty ones drop."""
    if stop is None:
        return ()
    items = [stop] if isinstance(stop, str) else stop
    limits_of(state.settings).check_stops(items)
    return tuple(s for s in items if s)


def grammar_of(state: ServerState, body: SamplingFields) -> str | None:
    """A raw GBNF `grammar` or a `response_format`, never both (llama-server's rule)."""
    fmt = body.response_format
    fmt_dict = fmt.model_dump(by_alias=True, exclude_none=True) if fmt is not None else None
    from_format = response_format_grammar(state, fmt_dict)
    if body.grammar:
        if from_format is not None:
            raise bad_request(
                "Field 'grammar': cannot be combined with a JSON 'response_format'; send one"
            )
        limits_of(state.settings).check_grammar(body.grammar)  # schemas were checked as such
        return body.grammar
    return from_format


def sampling_of(state: ServerState, body: SamplingFields) -> SamplingParams:
    """Validated sampling parameters; a seed of -1 means random even with a server --seed.
    A request's `lora` is checked here too: every generation reads its sampling."""
    if body.lora is not None:
        try:
            state.require_text_engine().check_lora(body.lora)
        except LlamactlError as exc:
            raise from_engine_error(exc) from exc
    seed = body.seed
    params = sampling_params(
        state,
        temperature=body.temperature,
        top_p=body.top_p,
        top_k=body.top_k,
        min_p=body.min_p,
        seed=None if seed == -1 else seed,
        presence_penalty=body.presence_penalty,
        frequency_penalty=body.frequency_penalty,
        repeat_penalty=body.repeat_penalty,
        logit_bias=body.logit_bias,
        grammar=grammar_of(state, body),
    )
    if seed == -1:
        params = dataclasses.replace(params, seed=None)
    return params


def fingerprint() -> str:
    return f"llamactl-{server_version()}"


# ---------------------------------------------------------------------------- results


def finish_reason(done: Done, called_tools: bool = False) -> str:
    """Engine reasons → OpenAI's; a cancelled choice (client gone, shutdown) reads as 'stop'."""
    if done.finish_reason == "length":
        return "length"
    return "tool_calls" if called_tools else "stop"


def usage_of(requests: list[list[Done]]) -> dict[str, Any]:
    """OpenAI usage over engine requests (one per prompt): each prompt counts once (§12, §14)."""
    prompt = cached = completion = reasoning = 0
    for dones in requests:
        p, c, k = total_usage(dones)
        prompt, cached, completion = prompt + p, cached + c, completion + k
        reasoning += sum(d.usage.reasoning_tokens for d in dones)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
        "completion_tokens_details": {"reasoning_tokens": reasoning},
    }


def timings_of(requests: list[list[Done]]) -> dict[str, float | int]:
    """llama-server's `timings` over choices: prompt work is summed (a child of `n` reports
    none, its parent decoded the prompt for it); generation time is the longest choice's, so
    `predicted_per_second` is the request's throughput."""
    dones = [d for group in requests for d in group]
    if len(dones) == 1:
        return dones[0].timings.as_dict()
    total = Timings(
        prompt_n=sum(d.timings.prompt_n for d in dones),
        prompt_ms=sum(d.timings.prompt_ms for d in dones),
        predicted_n=sum(d.timings.predicted_n for d in dones),
        predicted_ms=max((d.timings.predicted_ms for d in dones), default=0.0),
        cache_n=sum(d.timings.cache_n for d in dones if d.index == 0),
    )
    if dones[0].timings.draft_n is not None:
        total.draft_n = sum(d.timings.draft_n or 0 for d in dones)
        total.draft_n_accepted = sum(d.timings.draft_n_accepted or 0 for d in dones)
    return total.as_dict()


def check_top_logprobs(logprobs: bool, top: int | None) -> int | None:
    """OpenAI's rules: top_logprobs 0..20 and only with logprobs: true. Returns the engine's
    `logprobs` (None: off; k: the chosen token plus the top k)."""
    if top is not None:
        check_int_range("top_logprobs", top, 0, MAX_TOP_LOGPROBS)
        if not logprobs:
            raise bad_request("Field 'top_logprobs': requires 'logprobs' to be true")
    if not logprobs:
        return None
    return top or 0


def logprob_entry(
    chosen: TokenLogprob, top: tuple[TokenLogprob, ...], token_bytes: Callable[[int], bytes]
) -> dict[str, Any]:
    """OpenAI's `choices[].logprobs.content[]` item."""

    def one(t: TokenLogprob) -> dict[str, Any]:
        return {"token": t.text, "logprob": t.logprob, "bytes": list(token_bytes(t.token))}

    return {**one(chosen), "top_logprobs": [one(t) for t in top]}
