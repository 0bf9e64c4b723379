"""Speech-out and voice-conversation figures on the embedded models.

    python bench/voice.py [--runs 10] [--threads 2]

1. eSpeak NG synthesis speed: seconds of audio made per second of compute (higher is better),
   over a paragraph spoken a few times through llamactl's `EspeakSynthesizer`.
2. A realtime conversation turn on a running `llamactl serve` (SmolLM2-135M answers, Whisper
   tiny.en hears, eSpeak NG speaks): a ~3 s spoken question is sent over `/v1/realtime` in real
   time (100 ms appends, then silence, as a microphone would), server VAD ends the turn, and
   the time from the **end of speech** (the last speech sample sent) to the **first audio
   byte** of the answer is measured: p50 / p95 (target: p50 under 1.0 s on the project's
   2-core machine). It includes the VAD's `silence_duration_ms` (500 ms by default), the
   transcription, the prompt, the first sentence and its synthesis. The server's own
   `response.done` latency metadata are printed beside it.

Each turn opens a new session, so no turn can barge in on the previous answer's playback.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from llamactl.layout import entry_point

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from audiokit import silence, speech, to_rate, wer  # noqa: E402

VOICE = "en-us+f2"
QUESTION = "What is the capital of France, and why is it famous?"
PARAGRAPH = (
    "The weather is nice today and we are going to the park. Please send the report to my "
    "office before noon on Friday. The train to the city leaves at seven in the morning."
)
RATE = 24000


def espeak_speed(repeats: int = 5) -> tuple[float, float]:
    """(audio seconds per compute second, audio seconds per repeat)."""
    from llamactl.engine.audio.synth import open_synthesizer

    synth = open_synthesizer()
    list(synth.synthesize("Warm up."))
    samples = 0
    t0 = time.perf_counter()
    for _ in range(repeats):
        samples += sum(chunk.size for chunk in synth.synthesize(PARAGRAPH))
    compute = time.perf_counter() - t0
    audio = samples / synth.sample_rate
    return audio / compute, audio / repeats


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(threads: int) -> tuple[subprocess.Popen, int]:
    import httpx

    port = free_port()
    env = {**os.environ, "LLAMACTL_THREADS": str(threads)}
    env["LLAMACTL_TRANSCRIBE_THREADS"] = str(threads)
    server = subprocess.Popen(
        [*entry_point(), "serve", "--port", str(port), "--parallel", "1"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return server, port
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or server.poll() is not None:
            server.terminate()
            raise RuntimeError("llamactl serve did not start")
        time.sleep(0.2)


def one_turn(port: int, question: np.ndarray) -> dict:
    """Speak `question` in real time; times from the end of speech, and the server's view."""
    from websockets.sync.client import connect

    url = f"ws://127.0.0.1:{port}/v1/realtime"
    with connect(url, open_timeout=60, max_size=None) as ws:
        _wait(ws, "session.created")
        ws.send(
            json.dumps(
                {
                    "type": "session.update",
                    "session": {
                        "type": "realtime",
                        "instructions": "Answer in one short sentence.",
                        "max_output_tokens": 48,
                        "temperature": 0,
                    },
                }
            )
        )
        _wait(ws, "session.updated")
        audio = np.concatenate([silence(0.3, RATE), question])
        trailing = silence(3.0, RATE)  # the microphone keeps sending silence
        marks: dict[str, float] = {}
        stop = threading.Event()

        def send() -> None:
            step = RATE // 10
            t0 = time.perf_counter()
            sent = 0
            for part in (audio, trailing):
                for i in range(0, part.size, step):
                    if stop.is_set():
                        return
                    chunk = base64.b64encode(part[i : i + step].astype("<i2").tobytes())
                    ws.send(
                        json.dumps({"type": "input_audio_buffer.append", "audio": chunk.decode()})
                    )
                    sent += part[i : i + step].size
                    time.sleep(max(0.0, t0 + sent / RATE - time.perf_counter()))
                if part is audio:
                    marks["speech_end"] = t0 + sent / RATE

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        transcript = ""
        try:
            while True:
                event = json.loads(ws.recv(timeout=60))
                kind = event["type"]
                if kind == "response.output_audio.delta" and "first_audio" not in marks:
                    marks["first_audio"] = time.perf_counter()
                elif kind == "conversation.item.input_audio_transcription.completed":
                    transcript = event["transcript"]
                elif kind == "error":
                    raise RuntimeError(event["error"]["message"])
                elif kind == "response.done":
                    meta = event["response"].get("metadata") or {}
                    output = event["response"]["output"]
                    answer = output[0]["content"][0]["transcript"] if output else ""
                    if "first_audio" not in marks:
                        raise RuntimeError(f"no audio in the answer: {event['response']}")
                    break
        finally:
            stop.set()
            sender.join()
    return {
        "latency": marks["first_audio"] - marks["speech_end"],
        "transcript": transcript,
        "answer": answer,
        "meta": meta,
    }


def _wait(ws, kind: str) -> dict:
    while True:
        event = json.loads(ws.recv(timeout=60))
        if event["type"] == kind:
            return event
        if event["type"] == "error":
            raise RuntimeError(event["error"]["message"])


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="realtime turns to time")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    speed, per = espeak_speed()
    print(f"eSpeak NG: {speed:.0f} s of audio per s of compute ({per:.1f} s paragraph)")

    pcm, rate = speech(QUESTION, VOICE)
    question = to_rate(pcm, rate, RATE)
    print(f"realtime turn: a {question.size / RATE:.1f} s spoken question, {args.runs} runs")
    server, port = start_server(args.threads)
    try:
        one_turn(port, question)  # warm up: loads the speech model, fills the prompt cache
        turns = [one_turn(port, question) for _ in range(args.runs)]
    finally:
        server.terminate()
        server.wait(timeout=30)
    first = turns[0]
    print(f"  heard: {first['transcript']!r} (WER {wer(QUESTION, first['transcript']):.2f})")
    print(f"  answer: {first['answer']!r}")
    lat = [t["latency"] * 1000 for t in turns]
    print(
        f"  end of speech -> first audio byte: p50 {statistics.median(lat):.0f} ms   "
        f"p95 {pct(lat, 0.95):.0f} ms   target p50 < 1000 ms"
    )
    for key in ("transcription_ms", "first_text_ms", "first_audio_ms"):
        values = [float(t["meta"][key]) for t in turns if key in t["meta"]]
        if values:
            print(
                f"  server {key:<17} p50 {statistics.median(values):.0f} ms   "
                f"p95 {pct(values, 0.95):.0f} ms"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
