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


ANSWER = "The capital of France is Paris, famous for the Eiffel Tower."


def synth_speed(backend: str, repeats: int = 5) -> tuple[float, float, float]:
    """(audio seconds per compute second, audio seconds per repeat, median ms to the first
    chunk of a one-sentence answer)."""
    from llamactl.engine.audio.synth import open_synthesizer

    synth = open_synthesizer(backend)
    list(synth.synthesize("Warm up."))
    samples = 0
    t0 = time.perf_counter()
    for _ in range(repeats):
        samples += sum(chunk.size for chunk in synth.synthesize(PARAGRAPH))
    compute = time.perf_counter() - t0
    audio = samples / synth.sample_rate
    firsts = []
    for _ in range(repeats):
        t1 = time.perf_counter()
        chunks = synth.synthesize(ANSWER)
        next(chunks)
        firsts.append((time.perf_counter() - t1) * 1000)
        chunks.close()
    return audio / compute, audio / repeats, statistics.median(firsts)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(threads: int, parallel: int = 1) -> tuple[subprocess.Popen, int]:
    import httpx

    port = free_port()
    env = {**os.environ, "LLAMACTL_THREADS": str(threads)}
    env["LLAMACTL_TRANSCRIBE_THREADS"] = str(threads)
    server = subprocess.Popen(
        [*entry_point(), "serve", "--port", str(port), "--parallel", str(parallel), "--metrics"],
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


class ChatLoad:
    """`n` chat streams kept running on the server (each a long streamed answer, then the
    next), the load a voice turn must hold its latency under."""

    def __init__(self, port: int, n: int) -> None:
        self._url = f"http://127.0.0.1:{port}/v1/chat/completions"
        self._stop = threading.Event()
        self.tokens = 0
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(n)]

    def __enter__(self) -> ChatLoad:
        for t in self._threads:
            t.start()
        time.sleep(1.5)  # every stream past its prompt, generating
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join()

    def _run(self) -> None:
        import httpx

        body = {
            "messages": [{"role": "user", "content": "Write a long story about a lighthouse."}],
            "max_tokens": 400,
            "stream": True,
        }
        while not self._stop.is_set():
            with httpx.stream("POST", self._url, json=body, timeout=120) as r:
                for line in r.iter_lines():
                    if self._stop.is_set():
                        return
                    if line.startswith("data: {"):
                        self.tokens += 1


def one_turn(
    port: int, question: np.ndarray, turn_detection: dict, voice: str | None = None
) -> dict:
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
                        "audio": {
                            "input": {"turn_detection": turn_detection},
                            **({"output": {"voice": voice}} if voice else {}),
                        },
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
    turn = SmartTurn()  # as the server runs it: two threads, the decode paused
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


def print_turns(title: str, turns_by_mode: dict[str, list[dict]]) -> None:
    print(f"  {title}")
    print(f"  {'':<13} {'p50 ms':>7} {'p95 ms':>7} {'cut off':>8} {'started ahead':>14}")
    for mode, turns in turns_by_mode.items():
        lat = [t["latency"] * 1000 for t in turns]
        cut = sum(t["cut_offs"] > 0 for t in turns)
        ahead = sum(t["meta"].get("speculated") == "true" for t in turns)
        print(
            f"  {mode:<13} {statistics.median(lat):>7.0f} {pct(lat, 0.95):>7.0f} "
            f"{cut:>4} / {len(turns):<3} {ahead:>6} / {len(turns)}"
        )


def stage_metrics(port: int) -> dict[str, float]:
    """The server's `llamactl:voice_*` rows of /metrics."""
    import httpx

    out: dict[str, float] = {}
    for line in httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text.splitlines():
        if line.startswith("llamactl:voice_"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def print_stage_metrics(before: dict[str, float], after: dict[str, float], label: str) -> None:
    """Per stage: mean wait before its compute and mean compute, over the turns between."""
    stages = sorted({k.split('stage="')[1].split('"')[0] for k in after if 'stage="' in k})
    if not stages:
        return
    print(f"  per stage ({label}), mean ms: wait for the cores / compute")
    for stage in stages:

        def delta(kind: str, stage: str = stage) -> float:
            key = f'llamactl:voice_stage_{kind}{{stage="{stage}"}}'
            return after.get(key, 0.0) - before.get(key, 0.0)

        n = delta("seconds_count")
        if n:
            print(
                f"    {stage:<12} n={n:<4.0f} wait {delta('wait_seconds_sum') / n * 1000:>6.0f}"
                f"  compute {delta('seconds_sum') / n * 1000:>6.0f}"
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=20, help="realtime turns per mode")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--load", type=int, default=4, help="chat streams in the load section")
    parser.add_argument(
        "--only",
        choices=["speech", "turns", "load"],
        action="append",
        help="run only these sections (speech out, idle turns, turns under load)",
    )
    args = parser.parse_args()
    only = set(args.only or ["speech", "turns", "load"])

    if "speech" in only:
        print("speech out, audio s per compute s (higher is better) / first chunk of a sentence:")
        for backend, label in (("espeak", "eSpeak NG"), ("piper", "Piper joe (medium)")):
            speed, per, first = synth_speed(backend)
            print(
                f"  {label:<19} {speed:>6.1f}x real time ({per:.1f} s paragraph)   "
                f"first audio {first:.0f} ms"
            )
        print("  target: a neural voice >= 3x real time on 2 cores")

    from llamactl.engine.audio.turn import fetch_model

    fetch_model()  # semantic VAD's Smart Turn: in the package since the install
    questions = [spoken_turn(TURNS[i % len(TURNS)]) for i in range(args.turns)]
    paused = sum(len(TURNS[i % len(TURNS)]) > 1 for i in range(args.turns))
    if "turns" in only:
        smart_turn_verdicts()
        people = human_turns(max(1, args.turns // 8))
        print(f"realtime turns: {args.turns} spoken questions per mode, {paused} with a pause")
    server, port = start_server(args.threads, parallel=1 + args.load)
    try:
        one_turn(port, questions[0], MODES["server VAD"])  # warm up: speech model, prompt cache
        one_turn(port, questions[0], MODES["semantic VAD"])  # ... and Smart Turn
        if "turns" in only:
            idle_turns(port, questions, people)
        if "load" in only:
            load_turns(port, questions, args.load)
    finally:
        server.terminate()
        server.wait(timeout=30)
    return 0


def idle_turns(port: int, questions: list[np.ndarray], people) -> None:
    before = stage_metrics(port)
    results: dict[str, list[dict]] = {mode: [] for mode in MODES}
    for q in questions:  # the modes interleaved, so a slow minute falls on both
        for mode, td in MODES.items():
            results[mode].append(one_turn(port, q, td))
    human: dict[str, list[dict]] = {mode: [] for mode in MODES}
    for _, q in people:
        for mode, td in MODES.items():
            human[mode].append(one_turn(port, q, td))
    piper = [one_turn(port, q, MODES["semantic VAD"], voice="joe") for q in questions]
    after = stage_metrics(port)
    first = results["server VAD"][0]
    print(f"  heard: {first['transcript']!r} (WER {wer(QUESTION, first['transcript']):.2f})")
    print(f"  answer: {first['answer']!r}")
    print_turns("eSpeak-spoken questions, end of speech -> first audio:", results)
    print("  target: semantic p50 < 350 ms, p95 < 500 ms; no more cut-offs than server VAD")
    if people:
        print_turns(f"spoken by a person ({len(people)} turns, alsa-utils' words):", human)
        print("  anchor: csglite 870 ms end of turn -> first audio")
    print_turns("answers spoken by Piper (joe), semantic VAD:", {"semantic VAD": piper})
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
    print_stage_metrics(before, after, "idle turns")


def load_turns(port: int, questions: list[np.ndarray], load: int) -> None:
    """The same turns alone and with `load` chat streams running, interleaved."""
    idle: dict[str, list[dict]] = {mode: [] for mode in MODES}
    loaded: dict[str, list[dict]] = {mode: [] for mode in MODES}
    tokens = 0
    seconds = 0.0
    stages_idle: list[dict[str, float]] = []
    stages_load: list[dict[str, float]] = []
    for q in questions:
        for mode, td in MODES.items():
            m0 = stage_metrics(port)
            idle[mode].append(one_turn(port, q, td))
            m1 = stage_metrics(port)
            with ChatLoad(port, load) as chats:
                t0 = time.perf_counter()
                loaded[mode].append(one_turn(port, q, td))
                seconds += time.perf_counter() - t0
                m2 = stage_metrics(port)
            tokens += chats.tokens
            stages_idle.append({k: m1.get(k, 0.0) - m0.get(k, 0.0) for k in m1})
            stages_load.append({k: m2.get(k, 0.0) - m1.get(k, 0.0) for k in m2})
    print(f"voice under load: {load} chat streams on the same server ({len(questions)} turns)")
    print_turns("idle (interleaved with the loaded turns):", idle)
    print_turns(f"with {load} chat streams:", loaded)
    for mode in MODES:
        p_idle = pct([t["latency"] for t in idle[mode]], 0.95)
        p_load = pct([t["latency"] for t in loaded[mode]], 0.95)
        print(f"  {mode:<13} p95 under load / idle p95: {p_load / p_idle:.2f} (target <= 1.5)")
    print(f"  the chat streams meanwhile: {tokens / max(seconds, 1e-9):.0f} tokens/s together")
    zero: dict[str, float] = {}
    print_stage_metrics(zero, _summed(stages_idle), "idle")
    print_stage_metrics(zero, _summed(stages_load), f"{load} chat streams")


def _summed(deltas: list[dict[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for d in deltas:
        for k, v in d.items():
            out[k] = out.get(k, 0.0) + v
    return out


if __name__ == "__main__":
    sys.exit(main())
