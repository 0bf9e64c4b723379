"""Server-sent events: framing, idle pings, and cancelling generation when the client leaves.

A ping is the SSE comment `:\\n\\n` (or the API's own keep-alive event: Anthropic's `ping`,
which clients' stream watchdogs count and comments do not), written whenever nothing was sent
for `ping_interval` seconds (prompt processing included). Starlette cancels the body iterator
when the client disconnects; `on_close` then cancels the engine stream so its slot is freed
within a step.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi.responses import StreamingResponse

PING = ":\n\n"
DONE = "data: [DONE]\n\n"


# One encoder for every frame: json.dumps with options builds a new one per call.
_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def data_frame(obj: Any) -> str:
    return f"data: {_encode(obj)}\n\n"


def event_frame(name: str, obj: Any) -> str:
    return f"event: {name}\ndata: {_encode(obj)}\n\n"


class _Outbox:
    """Frames waiting to be written, filled by the task that runs the source.

    Running the source in its own task lets the writer take every frame that is ready in one
    write (the tokens of n choices, a draft's accepted tokens), and lets a timer add a ping
    without touching the per-frame path: each frame costs an append, not a task or a timeout.
    """

    __slots__ = ("frames", "ready", "ended", "error", "last")

    def __init__(self, now: float) -> None:
        self.frames: deque[str] = deque()
        self.ready = asyncio.Event()
        self.ended = False
        self.error: BaseException | None = None
        self.last = now

    def put(self, frame: str, now: float) -> None:
        self.frames.append(frame)
        self.last = now
        self.ready.set()

    def take(self) -> str:
        frames, self.frames = self.frames, deque()
        self.ready.clear()
        return frames[0] if len(frames) == 1 else "".join(frames)


async def with_pings(
    source: AsyncIterator[str], interval: float | None, ping: str = PING
) -> AsyncIterator[str]:
    """Yield the source's frames, several ready at once joined into one, and `ping` after
    every `interval` seconds of silence (prompt processing included)."""
    loop = asyncio.get_running_loop()
    box = _Outbox(loop.time())

    async def pump() -> None:
        try:
            async for frame in source:
                box.put(frame, loop.time())
        except Exception as exc:  # handed to the writer, raised there
            box.error = exc
        finally:
            box.ended = True
            box.ready.set()

    timer: asyncio.TimerHandle | None = None

    def ping_due() -> None:
        nonlocal timer
        assert interval is not None
        idle = loop.time() - box.last
        if idle >= interval and not box.frames and not box.ended:
            box.put(ping, loop.time())
            idle = 0.0
        timer = loop.call_later(max(interval - idle, 0.0), ping_due)

    producer = asyncio.ensure_future(pump())
    if interval and interval > 0:
        timer = loop.call_later(interval, ping_due)
    try:
        while True:
            if not box.frames and not box.ended:
                await box.ready.wait()
            if box.frames:
                yield box.take()
            elif box.ended:
                if box.error is not None:
                    raise box.error
                return
    finally:
        if timer is not None:
            timer.cancel()
        if not producer.done():
            producer.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await producer
        aclose = getattr(source, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()


def sse_response(
    frames: AsyncIterator[str],
    *,
    ping_interval: float | None,
    ping: str = PING,
    on_close: Callable[[], None] | None = None,
    headers: dict[str, str] | None = None,
) -> StreamingResponse:
    async def body() -> AsyncIterator[str]:
        try:
            async for frame in with_pings(frames, ping_interval, ping):
                yield frame
        finally:
            if on_close is not None:
                on_close()

    return StreamingResponse(
        body(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **(headers or {})},
    )
