"""Server-sent events: framing, idle pings, and cancelling generation when the client leaves.

A ping is the SSE comment `:\\n\\n`, written whenever nothing was sent for `ping_interval`
seconds (prompt processing included). Starlette cancels the body iterator when the client
disconnects; `on_close` then cancels the engine stream so its slot is freed within a step.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi.responses import StreamingResponse

PING = ":\n\n"
DONE = "data: [DONE]\n\n"


def data_frame(obj: Any) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False, separators=(',', ':'))}\n\n"


def event_frame(name: str, obj: Any) -> str:
    return f"event: {name}\ndata: {json.dumps(obj, ensure_ascii=False, separators=(',', ':'))}\n\n"


async def with_pings(source: AsyncIterator[str], interval: float | None) -> AsyncIterator[str]:
    """Yield the source's frames, and a ping after every `interval` seconds of silence."""
    it = aiter(source)
    pending: asyncio.Future[str] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(it))
            if interval and interval > 0:
                done, _ = await asyncio.wait({pending}, timeout=interval)
                if not done:
                    yield PING
                    continue
            try:
                frame = await pending
            except StopAsyncIteration:
                return
            finally:
                if pending.done():
                    pending = None
            yield frame
    finally:
        if pending is not None and not pending.done():
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration, Exception):
                await pending
        aclose = getattr(it, "aclose", None)
        if aclose is not None:
            await aclose()


def sse_response(
    frames: AsyncIterator[str],
    *,
    ping_interval: float | None,
    on_close: Callable[[], None] | None = None,
) -> StreamingResponse:
    async def body() -> AsyncIterator[str]:
        try:
            async for frame in with_pings(frames, ping_interval):
                yield frame
        finally:
            if on_close is not None:
                on_close()

    return StreamingResponse(
        body(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
