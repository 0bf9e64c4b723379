"""Big request bodies are checked against the limits in a helper process before the server
parses them.

Parsing JSON holds Python's GIL, whichever thread does it: a 10 MB body of 200,000 messages
takes pydantic about a second, and for that second `/health`, every running stream and the
decode thread's bookkeeping wait. A body larger than `PRECHECK_BYTES` is therefore parsed first
in a separate process, which counts its JSON values and applies the same request limits
(server/limits.py) to the fields every family shares (`messages`, `input`, `stop`, `tools`,
`logit_bias`, schemas). Only a body that passes is parsed by the server; a hostile one is refused
without costing the server's process anything but the read.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import multiprocessing
from collections.abc import Callable
from typing import Any, TypeVar

import pydantic_core

from .errors import APIError
from .executors import LazyExecutor
from .limits import RequestLimits

__all__ = ["PRECHECK_BYTES", "check_body", "in_helper", "precheck", "shutdown"]

T = TypeVar("T")

# Smaller bodies parse in a few tens of milliseconds: not worth a trip to another process.
PRECHECK_BYTES = 1 << 20


def _spawn_helper() -> concurrent.futures.ProcessPoolExecutor:
    # spawn: forking a process that runs llama.cpp's threads is not safe
    context = multiprocessing.get_context("spawn")
    return concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=context)


_helper = LazyExecutor(_spawn_helper)


def shutdown() -> None:
    """Stop the helper process (the app's shutdown; it is started again when needed)."""
    _helper.shutdown()


async def in_helper(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` in the helper process (`fn` a module-level function, the arguments
    picklable): how any part of the server looks into a big body without holding the GIL.
    The router uses it to find the model a big body names."""
    try:
        return await asyncio.wrap_future(_helper.get().submit(fn, *args))
    except concurrent.futures.process.BrokenProcessPool:
        shutdown()  # the helper died (out of memory on this body): a new one for the next
        raise APIError(413, "the request body is too large to check") from None


async def precheck(raw: bytes, limits: RequestLimits, n_vocab: int) -> None:
    """Raise the APIError a body over the limits deserves, checked in the helper process."""
    verdict = await in_helper(check_body, raw, limits, n_vocab)
    if verdict is not None:
        raise APIError(*verdict)


def check_body(raw: bytes, limits: RequestLimits, n_vocab: int) -> tuple[int, str] | None:
    """(status, message) of the first limit `raw` breaks, or None. Runs in the helper."""
    try:
        body = pydantic_core.from_json(raw)
    except ValueError as exc:
        return 400, f"Invalid JSON in the request body: {exc}"
    try:
        limits.check_json_values(body)
        if isinstance(body, dict):
            _check_fields(body, limits, n_vocab)
    except APIError as exc:
        return exc.status, exc.message
    return None


def _check_fields(body: dict[str, Any], limits: RequestLimits, n_vocab: int) -> None:
    for field in ("messages", "input"):
        if isinstance(body.get(field), list):
            limits.check_messages(len(body[field]), field)
    for field in ("stop", "stop_sequences"):
        stops = body.get(field)
        if isinstance(stops, list):
            limits.check_stops([s for s in stops if isinstance(s, str)], field)
    tools = body.get("tools")
    if isinstance(tools, list):
        limits.check_tools(len(tools))
        for i, tool in enumerate(tools):
            limits.check_schema(tool, f"tools.{i}")
    bias = body.get("logit_bias")
    if isinstance(bias, dict):
        limits.check_logit_bias(len(bias), n_vocab)
    for field in ("response_format", "text"):
        limits.check_schema(body.get(field), field)
    if isinstance(body.get("grammar"), str):
        limits.check_grammar(body["grammar"])
