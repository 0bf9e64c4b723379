"""Spoken turns through the TUI itself, on the embedded models.

    python bench/tui.py [--runs 5] [--threads 2]

Starts the local server exactly as `llamactl tui` does (in-process, free port), then for each
run opens the app headless (Textual's test driver), plays a ~3 s spoken question from a WAV
file as the microphone at real-time pace, and waits for the answer. Per turn it prints what
the status bar shows (the server's `response.done` metadata: transcription wait, first text
and first audio after the response started) and the TUI's own clock from `speech_stopped`
(the server's end-of-speech decision) to the first answer text and the first audio chunk.
Each run is a new session, so no turn barges in on the previous answer.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import wave
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from audiokit import speech  # noqa: E402
from llamactl.tui.app import ChatApp  # noqa: E402
from llamactl.tui.audio import CountingPlayer, FileSource  # noqa: E402
from llamactl.tui.local_server import LocalServer  # noqa: E402
from serverkit import hermetic_settings  # noqa: E402

QUESTION = "What is the capital of France, and why is it famous?"


class Speaker(CountingPlayer):
    available = True  # ask for spoken answers


async def one_turn(url: str, wav: Path) -> dict[str, float | None]:
    app = ChatApp(
        url,
        server_label="bench",
        source_factory=lambda device: FileSource(wav, speed=1.0, tail_s=1.5),
        player_factory=lambda: (Speaker(), None),
        list_devices=lambda: [],
    )
    async with app.run_test(size=(100, 30)) as pilot:
        deadline = time.monotonic() + 180
        while app.status.latency.first_audio is None:
            if time.monotonic() > deadline:
                raise RuntimeError("no spoken answer within 180 s")
            await pilot.pause(0.05)
        server = app.status.latency
        client = app._latency
        return {
            "server transcript": server.transcript,
            "server first text": server.first_token,
            "server first audio": server.first_audio,
            "tui first text": client.first_token,
            "tui first audio": client.first_audio,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    samples, rate = speech(QUESTION, "en-us+f2")
    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "question.wav"
        with wave.open(str(wav), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(rate)
            w.writeframes(samples.astype("<i2").tobytes())
        print(f"question: {samples.size / rate:.1f} s of speech, {args.runs} turns")
        settings = hermetic_settings({"threads": args.threads, "temperature": 0.0})
        t0 = time.perf_counter()
        with LocalServer(settings, log_file=Path(tmp) / "server.log") as url:
            print(f"local server ready in {time.perf_counter() - t0:.1f} s")
            rows = [asyncio.run(one_turn(url, wav)) for _ in range(args.runs)]
    for key in rows[0]:
        values = sorted(v for v in (r[key] for r in rows) if v is not None)
        if not values:
            print(f"{key:>20}: n/a")
            continue
        p95 = values[min(len(values) - 1, round(0.95 * (len(values) - 1)))]
        print(
            f"{key:>20}: p50 {statistics.median(values):.2f} s  p95 {p95:.2f} s  "
            f"({', '.join(f'{v:.2f}' for v in values)})"
        )


if __name__ == "__main__":
    main()
