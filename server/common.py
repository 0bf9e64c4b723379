"""Pieces every API family shares: ids, parameter checks, sampling, starting a chat."""

from __future__ import annotations

import dataclasses
import math
import secrets
import time
from typing import Any

from fastapi import Request

from llamactl import (
    ChatRequest,
    ChatStream,
    Done,
    LlamactlError,
    Model,
    PromptProgress,
    RenderedChat,
    SamplingParams,
    json_grammar,
    json_schema_grammar,
)
from llamactl.engine_settings import sampling_defaults

from .errors import APIError, bad_request, field_range_error, from_engine_error
from .limits import limits_of
from .media import take_media
from .state import ServerState

INT32_MAX = 2**31 - 1
# llama.cpp samplers take a uint32 seed, and read 0xFFFFFFFF (LLAMA_DEFAULT_SEED) as "random"
SEED_SPACE = 2**32 - 1
SEED_RANGE = (-(2**63), 2**64 - 1)  # OpenAI's seed is an int64; unsigned 64-bit accepted too


def new_id(prefix: str) -> str:
    return f"{prefix}{secrets.token_hex(12)}"


def now() -> int:
    return int(time.time())


def server_state(request: Request) -> ServerState:
    state: ServerState = request.app.state.llamactl
    if not state.ready:
        raise APIError(503, state.load_error or "Loading model", "unavailable_error")
    state.metrics.count_request(route_template(request))
    return state


def route_template(request: Request) -> str:
    """The matched route's path template (`/v1/responses/{response_id}`), not the raw path:
    one metrics label per route instead of one per id a client asks about."""
    route = request.scope.get("route")
    return getattr(route, "path", None) or request.url.path


def check_model(state: ServerState, model: str | None) -> str:
    """The name an answer's `model` carries: the client's, which names this model, else the
    server's (one rule for every API family, as llama-server answers). With
    `--strict-model-names`, a name that is not this server's model is refused; by default
    any name is answered by the one model: many clients send a name of their own
    (`gpt-4o-mini`, a Claude model) and cannot be told otherwise.

    The file name, its stem and the --alias all name this server's model.
    """
    if model is None or model == "":
        return state.model_id
    if not state.settings.strict_model_names:
        return model
    names = {state.model_id, state.model_path.name, state.model_path.stem, str(state.model_path)}
    names.update(state.aliases)
    if model not in names:
        raise APIError(
            400,
            f"Field 'model': unknown model '{model}'; this server serves '{state.model_id}'",
            "invalid_request_error",
        )
    return model


def check_int_range(field: str, value: int | None, low: int, high: int) -> None:
    if value is not None and not low <= value <= high:
        raise field_range_error(field, low, high, value)


def check_float_range(field: str, value: float | None, low: float, high: float) -> None:
    if value is not None and not low <= value <= high:
        raise bad_request(
            f"Field '{field}': Value must be between {low} <= value <= {high}, but got {value}"
        )


def sampling_params(
    state: ServerState,
    *,
    temperature: float | None = None,
    top_p: float | None = None,
    top_k: int | None = None,
    min_p: float | None = None,
    seed: int | None = None,
    presence_penalty: float | None = None,
    frequency_penalty: float | None = None,
    repeat_penalty: float | None = None,
    logit_bias: dict[str, float | bool] | list[tuple[int | str, float | bool]] | None = None,
    grammar: str | None = None,
) -> SamplingParams:
    """Request values over the server's defaults, validated with messages naming the field."""
    s = state.settings
    check_float_range("temperature", temperature, 0.0, 2.0)
    check_float_range("top_p", top_p, 0.0, 1.0)
    check_float_range("min_p", min_p, 0.0, 1.0)
    check_float_range("presence_penalty", presence_penalty, -2.0, 2.0)
    check_float_range("frequency_penalty", frequency_penalty, -2.0, 2.0)
    # 0 would divide logits by zero; NaN fails every comparison and is refused too
    if repeat_penalty is not None and not 0.0 < repeat_penalty <= 100.0:
        raise bad_request(
            f"Field 'repeat_penalty': Value must be between 0 < value <= 100, but got "
            f"{repeat_penalty}"
        )
    check_int_range("top_k", top_k, 0, INT32_MAX)
    check_int_range("seed", seed, *SEED_RANGE)
    model = state.require_text_engine().model
    limits = limits_of(s)
    limits.check_logit_bias(len(logit_bias or ()), model.n_vocab)
    bias = logit_biases(model, logit_bias)
    defaults = sampling_defaults(s)
    return dataclasses.replace(
        defaults,
        temperature=defaults.temperature if temperature is None else temperature,
        top_p=defaults.top_p if top_p is None else top_p,
        top_k=defaults.top_k if top_k is None else top_k,
        min_p=defaults.min_p if min_p is None else min_p,
        seed=defaults.seed if seed is None else seed % SEED_SPACE,
        presence_penalty=defaults.presence_penalty
        if presence_penalty is None
        else presence_penalty,
        frequency_penalty=(
            defaults.frequency_penalty if frequency_penalty is None else frequency_penalty
        ),
        repeat_penalty=defaults.repeat_penalty if repeat_penalty is None else repeat_penalty,
        logit_bias=bias,
        grammar=defaults.grammar if grammar is None else grammar,
    )


def logit_biases(
    model: Model, given: dict[str, float | bool] | list[tuple[int | str, float | bool]] | None
) -> dict[int, float]:
    """Token → bias from OpenAI's form (token ids as keys) and llama-server's (a text key
    biases every token of the text; `[[key, bias], ...]`; `false` bans the token)."""
    pairs = list(given.items()) if isinstance(given, dict) else list(given or [])
    bias: dict[int, float] = {}
    for key, value in pairs:
        if isinstance(value, bool):
            if value:
                raise bad_request(f"Field 'logit_bias.{key}': true is not a bias; false bans")
            amount = -math.inf
        else:
            check_float_range(f"logit_bias.{key}", value, -100.0, 100.0)
            amount = float(value)
        for token in _bias_tokens(model, key):
            bias[token] = amount
    return bias


def _bias_tokens(model: Model, key: int | str) -> list[int]:
    if isinstance(key, str) and not key.strip().lstrip("-").isdigit():
        tokens = model.tokenize(key, add_special=False, parse_special=False)
        if not tokens:
            raise bad_request(f"Field 'logit_bias': the text '{key}' has no tokens")
        return tokens
    token = int(key)
    if not 0 <= token < model.n_vocab:
        raise bad_request(f"Field 'logit_bias': token id {token} is out of the vocabulary")
    return [token]


def response_format_grammar(
    state: ServerState, response_format: dict[str, Any] | None
) -> str | None:
    """OpenAI `response_format` → a grammar the sampler enforces (never just a prompt hint)."""
    if not response_format:
        return None
    kind = response_format.get("type")
    if kind in (None, "text"):
        return None
    limits = limits_of(state.settings)
    if kind == "json_object":
        schema = response_format.get("schema")
        limits.check_schema(schema, "response_format.schema")
        return json_schema_grammar(schema) if schema else json_grammar()
    if kind == "json_schema":
        spec = response_format.get("json_schema") or {}
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if schema is None:
            raise bad_request("Field 'response_format.json_schema.schema' is required")
        limits.check_schema(schema, "response_format.json_schema.schema")
        return json_schema_grammar(schema)
    raise bad_request(
        "Field 'response_format.type': expected 'text', 'json_object' or 'json_schema', "
        f"got '{kind}'"
    )


def check_chat_limits(
    state: ServerState, request: ChatRequest, *, messages_field: str = "messages"
) -> None:
    """The request-size limits of a chat prompt: messages, tools and their schemas."""
    limits = limits_of(state.settings)
    limits.check_messages(len(request.messages), messages_field)
    tools = request.tools or []
    limits.check_tools(len(tools))
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict):
            limits.check_schema(function.get("parameters"), f"tools.{i}.parameters")


def with_server_defaults(state: ServerState, request: ChatRequest) -> ChatRequest:
    """What the request leaves open, from the server's flags (`--reasoning`,
    `--reasoning-budget`, `--reasoning-format`, `--chat-template-kwargs`): one place, so every
    API family reasons alike."""
    s = state.settings
    changes: dict[str, Any] = {}
    if request.enable_thinking is None and s.reasoning != "auto":
        changes["enable_thinking"] = s.reasoning == "on"
    if request.reasoning_budget is None and s.reasoning_budget >= 0:
        changes["reasoning_budget"] = s.reasoning_budget
    if request.reasoning_format is None:
        changes["reasoning_format"] = s.reasoning_format
    if state.template_kwargs:
        changes["template_kwargs"] = {**state.template_kwargs, **request.template_kwargs}
    return dataclasses.replace(request, **changes) if changes else request


def render_chat(
    state: ServerState, request: ChatRequest, *, messages_field: str = "messages"
) -> RenderedChat:
    """The prompt a chat request renders to (for token counts), within the limits."""
    check_chat_limits(state, request, messages_field=messages_field)
    request = take_media(state, with_server_defaults(state, request))
    try:
        return state.require_chat().render(request)
    except LlamactlError as exc:
        raise from_engine_error(exc) from exc


def start_chat(
    state: ServerState, request: ChatRequest, *, messages_field: str = "messages"
) -> ChatStream:
    """Render and submit; engine errors become API errors before any byte is sent. (`n` was
    checked against the slots where the body was read: `openai_chat.params.choice_count`.)"""
    check_chat_limits(state, request, messages_field=messages_field)
    request = take_media(state, with_server_defaults(state, request))
    try:
        return state.require_chat().start(request)
    except LlamactlError as exc:
        raise from_engine_error(exc) from exc


def ping_interval(state: ServerState, requested: int | None) -> float:
    """Per-request `sse_ping_interval` over the server's; <= 0 disables pings."""
    if requested is None:
        return state.settings.sse_ping_interval
    check_int_range("sse_ping_interval", requested, -1, INT32_MAX)
    return float(requested)


def total_usage(dones: list[Done]) -> tuple[int, int, int]:
    """(prompt, cached, completion) over all choices; the prompt counts once."""
    if not dones:
        return 0, 0, 0
    first = min(dones, key=lambda d: d.index)
    return (
        first.usage.prompt_tokens,
        first.usage.cached_tokens,
        sum(d.usage.completion_tokens for d in dones),
    )


def progress_of(progress: PromptProgress) -> dict[str, Any]:
    """llama-server's `prompt_progress` object (`return_progress`), for every family."""
    return {
        "total": progress.total,
        "cache": progress.cache,
        "processed": progress.processed,
        "time_ms": round(progress.time_ms, 3),
    }
