"""Events pushed by the decode thread in one step wake each event loop once, and every
consumer still gets all of its events in order."""

from __future__ import annotations

import asyncio
import threading

from llamactl.engine.stream import GenerationStream, deliver_pending, deliver_together
from llamactl.engine.types import Done, TextDelta, Timings, Usage


def _delta(text: str) -> TextDelta:
    return TextDelta(text, (1,))


def _done() -> Done:
    return Done("stop", Usage(), Timings())


def test_one_wake_up_per_step_for_every_stream_of_a_loop():
    loop = asyncio.new_event_loop()
    wakeups = 0
    original = loop.call_soon_threadsafe

    def counting(callback, *args):
        nonlocal wakeups
        if threading.current_thread().name == "decode":
            wakeups += 1
        return original(callback, *args)

    loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
    streams = [GenerationStream(1, lambda s: None) for _ in range(3)]
    started = threading.Barrier(4)

    async def consume(stream: GenerationStream) -> list[str]:
        texts = []
        it = aiter(stream)
        first = asyncio.ensure_future(anext(it))
        await asyncio.sleep(0)  # the iterator has registered its waiter
        await asyncio.to_thread(started.wait)
        event = await first
        while True:
            if isinstance(event, TextDelta):
                texts.append(event.text)
            try:
                event = await anext(it)
            except StopAsyncIteration:
                return texts

    def decode_thread() -> None:
        started.wait()
        with deliver_together():
            for s in streams:
                s._push(_delta("a"))
            deliver_pending()  # a long prompt chunk follows: deliver what is ready
            for s in streams:
                s._push(_delta("b"))
                s._push(_done())

    async def main() -> list[list[str]]:
        worker = threading.Thread(target=decode_thread, name="decode")
        worker.start()
        out = await asyncio.gather(*(consume(s) for s in streams))
        worker.join()
        return list(out)

    try:
        assert loop.run_until_complete(main()) == [["a", "b"]] * 3
    finally:
        loop.close()
    assert wakeups == 2  # one per deliver point, not one per event (there were 9)
