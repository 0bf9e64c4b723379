"""The SSE writer: frames ready together leave in one write, silence gets pings, a failing
source ends the stream with its error, and a client that leaves closes the source."""

from __future__ import annotations

import asyncio

import pytest

from server.sse import PING, with_pings


async def _collect(source, interval):
    return [frame async for frame in with_pings(source, interval)]


def test_frames_ready_in_one_step_are_written_together():
    async def burst():
        for i in range(3):
            yield f"data: {i}\n\n"
        await asyncio.sleep(0.05)
        yield "data: last\n\n"

    out = asyncio.run(_collect(burst(), 10))
    assert out == ["data: 0\n\ndata: 1\n\ndata: 2\n\n", "data: last\n\n"]


def test_silence_is_filled_with_pings_and_frames_keep_their_order():
    async def slow():
        yield "data: a\n\n"
        await asyncio.sleep(0.35)
        yield "data: b\n\n"

    out = asyncio.run(_collect(slow(), 0.1))
    assert out[0] == "data: a\n\n" and out[-1] == "data: b\n\n"
    assert 2 <= out.count(PING) <= 4 and set(out[1:-1]) == {PING}


def test_no_pings_without_an_interval():
    async def slow():
        await asyncio.sleep(0.2)
        yield "data: a\n\n"

    assert asyncio.run(_collect(slow(), None)) == ["data: a\n\n"]


def test_a_source_error_reaches_the_writer_after_the_frames_before_it():
    async def failing():
        yield "data: a\n\n"
        raise ValueError("boom")

    async def run():
        seen = []
        with pytest.raises(ValueError, match="boom"):
            async for frame in with_pings(failing(), 1):
                seen.append(frame)
        return seen

    assert asyncio.run(run()) == ["data: a\n\n"]


def test_a_writer_that_stops_closes_the_source():
    closed = asyncio.Event()

    async def endless():
        try:
            while True:
                yield "data: x\n\n"
                await asyncio.sleep(0.01)
        finally:
            closed.set()

    async def run():
        frames = with_pings(endless(), 1)
        async for _ in frames:
            break
        await frames.aclose()
        await asyncio.wait_for(closed.wait(), 1)

    asyncio.run(run())
