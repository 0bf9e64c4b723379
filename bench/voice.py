"""Speech-out and voice-conversation figures on the embedded models.

    python bench/voice.py [--turns 20] [--threads 2]

1. eSpeak NG synthesis speed: seconds of audio made per second of compute (higher is better),
   over a paragraph spoken a few times through llamactl's `EspeakSynthesizer`.
2. Realtime conversation turns on a running `llamactl serve` (SmolLM2-135M answers, Whisper
   tiny.en hears, eSpeak NG speaks), once with server VAD (500 ms of silence) and once with
   semantic VAD (Smart Turn, eagerness auto): spoken questions, some with a pause in the
   middle of the sentence ("I would like to know" · 700 ms · "the capital of France."), are
   sent over `/v1/realtime` in real time (50 ms appends, as the TUI's microphone sends them,
   then silence).
   Measured per mode: the time from the **end of speech** (the last speech sample sent) to the
   **first audio byte** of the answer to the whole question, p50 / p95 (target: semantic p50
   under 350 ms), and the **premature cut-offs**: turns the server ended before the speaker
   had finished (a commit inside the question). The server's own `response.done` latency
   metadata are printed beside them.

3. Human speech beside eSpeak: a person's recordings (Debian's alsa-utils: "Front Left",
   "Rear Center"...) and eSpeak saying the same words. Smart Turn's verdict on each whole
   utterance (finished: should be high) and on its first half (cut off: should be low), with
   its inference time (anchor: Smart Turn's published 12-60 ms on CPU); then realtime turns
   spoken by the person, end of speech -> first audio (anchor: csglite's 0.87 s).

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

from audiokit import human_clips, silence, speech, to_rate, wer  # noqa: E402

VOICE = "en-us+f2"
QUESTION = "What is the capital of France, and why is it famous?"
# the spoken turns: a sentence, or parts with the pause (s) between them
TURNS: tuple[tuple[str | float, ...], ...] = (
    (QUESTION,),
    ("I would like to know", 0.7, "the capital of France."),
    ("Where is the nearest train station?",),
    ("Could you tell me", 0.8, "what time the train leaves?"),
)
MODES = {
    "server VAD": {"type": "server_vad", "silence_duration_ms": 500},
    "semantic VAD": {"type": "semantic_vad", "eagerness": "auto"},
}
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


def spoken_turn(parts: tuple[str | float, ...]) -> np.ndarray:
    out = []
    for part in parts:
        if isinstance(part, str):
            pcm, rate = speech(part, VOICE)
            out.append(to_rate(pcm, rate, RATE))
        else:
            out.append(silence(part, RATE))
    return np.concatenate(out)


def one_turn(port: int, question: np.ndarray, turn_detection: dict) -> dict:
    """Speak `question` in real time; times from the end of speech, the cut-offs before it,
    and the server's view."""
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
                        "audio": {"input": {"turn_detection": turn_detection}},
                    },
                }
            )
        )
        _wait(ws, "session.updated")
        lead = silence(0.3, RATE)
        audio = np.concatenate([lead, question])
        speech_end_ms = audio.size * 1000 / RATE
        trailing = silence(5.0, RATE)  # the microphone keeps sending silence
        marks: dict[str, float] = {}
        stop = threading.Event()

        def send() -> None:
            step = RATE // 20  # 50 ms: the TUI microphone's block
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
        turn_end_ms = 0.0
        cut_offs = 0
        finished = False  # the commit that holds the whole question has come
        answer_id: str | None = None
        try:
            while True:
                event = json.loads(ws.recv(timeout=60))
                kind = event["type"]
                if kind == "input_audio_buffer.committed":
                    if (event.get("audio_end_ms") or 0) < speech_end_ms - 100:
                        cut_offs += 1
                    elif not finished:
                        finished = True
                        marks["committed"] = time.perf_counter()
                        turn_end_ms = (event.get("audio_end_ms") or 0) - speech_end_ms
                elif kind == "response.created" and finished and answer_id is None:
                    answer_id = event["response"]["id"]
                elif (
                    kind == "response.output_audio.delta"
                    and event.get("response_id") == answer_id
                    and "first_audio" not in marks
                ):
                    marks["first_audio"] = time.perf_counter()
                elif kind == "conversation.item.input_audio_transcription.completed":
                    transcript = event["transcript"]
                elif kind == "error":
                    raise RuntimeError(event["error"]["message"])
                elif kind == "response.done" and event["response"]["id"] == answer_id:
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
        "turn_end_ms": turn_end_ms,  # the silence the VAD waited for (audio time)
        "answer_ms": (marks["first_audio"] - marks["committed"]) * 1000,
        "cut_offs": cut_offs,
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


def smart_turn_verdicts() -> None:
    """Smart Turn on a person's words and on eSpeak's, whole and cut in half."""
    from llamactl.engine.audio.turn import SmartTurn

    clips = human_clips()
    if not clips:
        print("human speech: none (apt-get install alsa-utils)")
        return
    turn = SmartTurn(threads=1)
    rows: dict[str, list[tuple[float, float]]] = {"human": [], "eSpeak": []}
    times: list[float] = []
    for name, (pcm, rate) in clips.items():
        espeak_pcm, espeak_rate = speech(name, VOICE)
        for kind, (samples, sr) in (("human", (pcm, rate)), ("eSpeak", (espeak_pcm, espeak_rate))):
            audio = to_rate(samples, sr, 16000).astype(np.float32) / 32768.0
            t0 = time.perf_counter()
            whole = turn.probability(audio)
            times.append((time.perf_counter() - t0) * 1000)
            rows[kind].append((whole, turn.probability(audio[: audio.size // 2])))
    print(f"Smart Turn on {len(clips)} two-word utterances (alsa-utils), P(finished):")
    print(f"  {'':<8} {'whole p50':>9} {'half p50':>9} {'whole>0.5':>10} {'half<0.5':>9}")
    for kind, pairs in rows.items():
        whole, half = [w for w, _ in pairs], [h for _, h in pairs]
        print(
            f"  {kind:<8} {statistics.median(whole):>9.2f} {statistics.median(half):>9.2f} "
            f"{sum(w > 0.5 for w in whole):>5} / {len(whole):<3} {sum(h < 0.5 for h in half):>4} / "
            f"{len(half)}"
        )
    print(
        f"  inference p50 {statistics.median(times):.0f} ms, p95 {pct(times, 0.95):.0f} ms "
        "(anchor: 12-60 ms published for CPU)"
    )


def human_turns(repeats: int) -> list[tuple[str, np.ndarray]]:
    """The person's words as realtime turns at 24 kHz, with the silence a turn ends on."""
    out = []
    for name, (pcm, rate) in list(human_clips().items()) * repeats:
        audio = np.concatenate([silence(0.3, RATE), to_rate(pcm, rate, RATE)])
        out.append((name, audio))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=20, help="realtime turns per mode")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    speed, per = espeak_speed()
    print(f"eSpeak NG: {speed:.0f} s of audio per s of compute ({per:.1f} s paragraph)")

    from llamactl.engine.audio.turn import fetch_model

    fetch_model()  # semantic VAD's Smart Turn: in the package since the install
    smart_turn_verdicts()
    people = human_turns(max(1, args.turns // 8))
    questions = [spoken_turn(TURNS[i % len(TURNS)]) for i in range(args.turns)]
    paused = sum(len(TURNS[i % len(TURNS)]) > 1 for i in range(args.turns))
    print(f"realtime turns: {args.turns} spoken questions per mode, {paused} with a pause")
    server, port = start_server(args.threads)
    try:
        one_turn(port, questions[0], MODES["server VAD"])  # warm up: speech model, prompt cache
        one_turn(port, questions[0], MODES["semantic VAD"])  # ... and Smart Turn
        results: dict[str, list[dict]] = {mode: [] for mode in MODES}
        for q in questions:  # the modes interleaved, so a slow minute falls on both
            for mode, td in MODES.items():
                results[mode].append(one_turn(port, q, td))
        human: dict[str, list[dict]] = {mode: [] for mode in MODES}
        for _, q in people:
            for mode, td in MODES.items():
                human[mode].append(one_turn(port, q, td))
    finally:
        server.terminate()
        server.wait(timeout=30)
    first = results["server VAD"][0]
    print(f"  heard: {first['transcript']!r} (WER {wer(QUESTION, first['transcript']):.2f})")
    print(f"  answer: {first['answer']!r}")
    print(f"  {'':<13} {'p50 ms':>7} {'p95 ms':>7} {'cut off':>8}   (end of speech -> first audio)")
    for mode, turns in results.items():
        lat = [t["latency"] * 1000 for t in turns]
        cut = sum(t["cut_offs"] > 0 for t in turns)
        print(
            f"  {mode:<13} {statistics.median(lat):>7.0f} {pct(lat, 0.95):>7.0f} "
            f"{cut:>4} / {len(turns)}"
        )
    print("  target: semantic p50 < 350 ms, no more cut-offs than server VAD")
    if people:
        print(f"  spoken by a person ({len(people)} turns, alsa-utils' words), same measure:")
        for mode, turns in human.items():
            lat = [t["latency"] * 1000 for t in turns]
            print(f"  {mode:<13} {statistics.median(lat):>7.0f} {pct(lat, 0.95):>7.0f}")
        print("  anchor: csglite 870 ms end of turn -> first audio")
    print("  where the time goes, p50 ms: the silence each turn waited (audio time past the last")
    print("  word) + commit -> first audio byte; semantic turns Smart Turn judged finished apart")
    for mode, turns in results.items():
        groups = {mode: turns}
        if mode == "semantic VAD":
            groups["  judged finished"] = [t for t in turns if t["turn_end_ms"] < 400]
            groups["  judged unfinished"] = [t for t in turns if t["turn_end_ms"] >= 400]
        for name, group in groups.items():
            if group:
                print(
                    f"  {name:<20} n={len(group):<3} silence "
                    f"{statistics.median(t['turn_end_ms'] for t in group):>5.0f}"
                    f"  answer {statistics.median(t['answer_ms'] for t in group):>4.0f}"
                    f"  total {statistics.median(t['latency'] * 1000 for t in group):>5.0f}"
                )
    for mode, turns in results.items():
        for key in ("transcription_ms", "first_text_ms", "first_audio_ms"):
            values = [float(t["meta"][key]) for t in turns if key in t["meta"]]
            if values:
                print(
                    f"  {mode:<13} server {key:<17} p50 {statistics.median(values):.0f} ms   "
                    f"p95 {pct(values, 0.95):.0f} ms"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
