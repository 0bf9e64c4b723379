"""Speech-to-text figures: the embedded Whisper tiny.en on 2 threads, beside its anchors.

    python bench/transcribe.py [--runs 10] [--threads 2] [--models whisper-tiny.en,whisper-base]

1. Real-time factor (compute seconds per second of audio, lower is better) of
   - faster-whisper alone: `WhisperModel.transcribe`, greedy, on the whole recording (anchor:
     0.072 on the project's 2-core machine);
   - the streaming path: `TranscriptionStream` with VAD turn detection, fed as fast as
     possible, first append to last completion (target: at most 0.08);
   - the streaming path live: fed in real time with partial hypotheses on, worker busy time
     over audio time (what a live session costs the machine).
   Each of `--models` (default: the embedded tiny.en and, when its packages are installed,
   Whisper base) is measured in turn, with its WER on the recording.
2. Realtime latency on a running `llamactl serve`: a ~5 s utterance is sent over
   `/v1/realtime` in real time (100 ms appends), then committed; the time from sending the
   commit to receiving its `...transcription.completed` (target: p50 at most 300 ms).

Speech is synthesized with eSpeak NG (`espeakng-loader`, the test extra), nothing downloaded.
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
import time
from pathlib import Path

import numpy as np

from llamactl.layout import entry_point

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from audiokit import SENTENCES, speech, to_rate, utterances, wer  # noqa: E402

VOICE = "en-us+f2"
UTTERANCE = (
    "Please send the report to my office before noon on Friday, and call me when it is done."
)


def rtf_faster_whisper(pcm: np.ndarray, rate: int, threads: int, name: str) -> tuple[float, str]:
    from faster_whisper import WhisperModel

    from llamactl.engine.audio.pcm import resample, to_float32
    from llamactl.engine.audio.whisper import named_model_dir

    model = WhisperModel(
        str(named_model_dir(name)), device="cpu", compute_type="int8", cpu_threads=threads
    )
    audio = resample(to_float32(pcm), rate, 16000)
    list(model.transcribe(audio[:16000], language="en", beam_size=1)[0])  # warm up
    t0 = time.perf_counter()
    segments, _ = model.transcribe(
        audio, language="en", beam_size=1, temperature=0.0, condition_on_previous_text=False
    )
    text = " ".join(s.text for s in segments)
    return (time.perf_counter() - t0) / (audio.size / 16000), text


def rtf_stream(pcm: np.ndarray, rate: int, threads: int, name: str) -> tuple[float, float, str]:
    """(fast-feed wall RTF, live busy RTF, transcript)."""
    from llamactl.engine.audio import AudioService, Completed

    service = AudioService(name, threads=threads)
    worker = service.worker()
    warm = service.open_stream(input_rate=rate)
    warm.append(pcm[: rate * 2])
    warm.commit()
    warm.wait_idle()
    warm.close()
    seconds = pcm.size / rate

    stream = service.open_stream(input_rate=rate, turn_detection=True, partials=False)
    t0 = time.perf_counter()
    for i in range(0, pcm.size, rate // 10):
        stream.append(pcm[i : i + rate // 10])
    stream.commit()
    stream.wait_idle()
    fast = (time.perf_counter() - t0) / seconds
    texts = []
    while (ev := stream.next_event(timeout=0)) is not None:
        if isinstance(ev, Completed) and ev.transcript:
            texts.append(ev.transcript)
    stream.close()

    stream = service.open_stream(input_rate=rate, turn_detection=True, partials=True)
    busy0, t0 = worker.busy_seconds, time.perf_counter()
    step = rate // 10
    for i in range(0, pcm.size, step):
        stream.append(pcm[i : i + step])
        time.sleep(max(0.0, t0 + (i + step) / rate - time.perf_counter()))
    stream.commit()
    stream.wait_idle()
    live = (worker.busy_seconds - busy0) / seconds
    stream.close()
    service.close()
    return fast, live, " ".join(texts)


def default_models() -> list[str]:
    """The embedded tiny.en, and Whisper base when its packages are installed."""
    import importlib.util

    from llamactl.engine.audio.whisper import BASE_NAME, BASE_PACKAGES, EMBEDDED_NAME

    found = all(importlib.util.find_spec(p) for p in BASE_PACKAGES)
    return [EMBEDDED_NAME, BASE_NAME] if found else [EMBEDDED_NAME]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def realtime_latency(runs: int, threads: int) -> list[float]:
    import httpx
    from websockets.sync.client import connect

    port = free_port()
    env = {**os.environ, "LLAMACTL_THREADS": str(threads)}
    env["LLAMACTL_TRANSCRIBE_THREADS"] = str(threads)
    server = subprocess.Popen(
        [*entry_point(), "serve", "--port", str(port), "--parallel", "1"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or server.poll() is not None:
                raise RuntimeError("llamactl serve did not start")
            time.sleep(0.2)
        pcm, rate = speech(UTTERANCE, VOICE)
        audio = to_rate(pcm, rate, 24000)
        latencies = []
        url = f"ws://127.0.0.1:{port}/v1/realtime?intent=transcription"
        with connect(url, open_timeout=60, max_size=None) as ws:
            _wait(ws, "session.created")
            for run in range(runs + 1):  # the first run warms the model up
                step = 2400
                t0 = time.perf_counter()
                for i in range(0, audio.size, step):
                    chunk = base64.b64encode(audio[i : i + step].astype("<i2").tobytes())
                    ws.send(
                        json.dumps({"type": "input_audio_buffer.append", "audio": chunk.decode()})
                    )
                    time.sleep(max(0.0, t0 + (i + step) / 24000 - time.perf_counter()))
                sent = time.perf_counter()
                ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
                done = _wait(ws, "conversation.item.input_audio_transcription.completed")
                if run:
                    latencies.append(time.perf_counter() - sent)
                if run == 1:
                    text = done["transcript"]
                    print(f"  transcript: {text!r} (WER {wer(UTTERANCE, text):.2f})")
        return latencies
    finally:
        server.terminate()
        server.wait(timeout=30)


def _wait(ws, kind: str) -> dict:
    while True:
        event = json.loads(ws.recv(timeout=60))
        if event["type"] == kind:
            return event
        if event["type"] == "error":
            raise RuntimeError(event["error"]["message"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="realtime latency runs")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--models", help="comma-separated speech models (default: both)")
    args = parser.parse_args()
    models = args.models.split(",") if args.models else default_models()

    pcm, rate = utterances(SENTENCES * 2, voice=VOICE, gap=0.8)
    seconds = pcm.size / rate
    reference = " ".join(SENTENCES * 2)
    print(f"audio: {seconds:.1f} s of eSpeak NG speech, {args.threads} threads")
    for name in models:
        print(f"{name}:")
        anchor, text = rtf_faster_whisper(pcm, rate, args.threads, name)
        print(
            f"  faster-whisper alone (greedy)   RTF {anchor:.3f}   WER {wer(reference, text):.3f}"
        )
        fast, live, text = rtf_stream(pcm, rate, args.threads, name)
        print(
            f"  streaming path (fed at once)    RTF {fast:.3f}   WER {wer(reference, text):.3f}"
            "   target <= 0.08"
        )
        print(f"  streaming path (live, partials) RTF {live:.3f}   (worker busy / audio time)")
    print(
        f"realtime commit -> completed, {args.runs} runs of a "
        f"{speech(UTTERANCE, VOICE)[0].size / speech(UTTERANCE, VOICE)[1]:.1f} s utterance:"
    )
    lat = sorted(realtime_latency(args.runs, args.threads))
    p50 = statistics.median(lat) * 1000
    p95 = lat[min(len(lat) - 1, round(0.95 * (len(lat) - 1)))] * 1000
    print(f"  p50 {p50:.0f} ms   p95 {p95:.0f} ms   target p50 <= 300 ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
