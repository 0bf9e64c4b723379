"""Barge-in without headphones: how well the TUI's echo canceller keeps the assistant's own
voice from being taken for the user, and lets the user through.

    python bench/echo.py [--clips 20] [--seed 0] [--json]

Each clip is a conversation's second answer as a loudspeaker plays it into a small room: the
first answer (which the canceller learns the room from) then a gap then the second one,
both eSpeak NG speech (with clock drift, a third answer: the drift is measured on the echo
of the first two). The room is drawn per clip:

- the echo's delay, 20-450 ms (device latencies plus the air);
- its level, 0.3-1.0 of what was played (about -10 to 0 dB: a laptop's speaker an arm away,
  up to the microphone beside the speaker);
- a reverberant path: a direct sound, early reflections and a decaying diffuse tail
  (RT60 0.15-0.4 s, longer than the canceller's 160 ms filter; the direct sound 3-12 dB
  above the reverberation, as for a microphone within an arm of the speaker);
- on half the clips a loudspeaker driven into soft clipping (a non-linear echo no linear
  filter removes whole), and on a third a clock drift between player and microphone
  (+-100 ppm, as two sound cards on separate crystals).

Two sets of 20 clips (target from the issue: 0 false barge-ins, >= 19 of 20 found):

1. **Echo only**: nothing but the answers' echo and the room's noise. A *false barge-in* is
   any speech the server's VAD (Silero, server_vad's threshold 0.5) finds in the cancelled
   signal.
2. **Barge-in**: a user (another voice, another sentence, 0.5-1.0 of full level) starts
   talking at a random moment of the second answer. *Found* when the VAD's first speech region
   starts within 0.5 s of the user's first word (and no region comes earlier).

The same clips without the canceller are counted beside them (the anchor: what the TUI heard
before it had one), with the canceller's cost in real time.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soxr

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from audiokit import SENTENCES, speech  # noqa: E402

from llamactl.devices.echo import EchoCanceller  # noqa: E402
from llamactl.engine.audio.vad import VAD_RATE, speech_regions  # noqa: E402

RATE = 24000  # what the TUI plays and records
NOISE = 3e-4  # the room's noise floor (-70 dBFS)
PLAY_BLOCK = 480  # 20 ms: what the player hands the device
MIC_BLOCK = 2400  # 100 ms: what the TUI reads from the microphone
ANSWER_VOICES = ("en-us", "en-gb", "en-us+m3")
USER_VOICES = ("en-us+f2", "en-us+f4", "en-gb+f3")
FOUND_WITHIN = 0.5  # seconds after the user's first word


@dataclass(frozen=True)
class Room:
    delay_ms: float
    gain: float
    rt60: float
    drr_db: float
    clipping: bool
    drift_ppm: float

    def describe(self) -> str:
        parts = [
            f"{self.delay_ms:3.0f} ms",
            f"x{self.gain:.2f}",
            f"RT60 {self.rt60:.2f} s",
            f"DRR {self.drr_db:.0f} dB",
        ]
        if self.clipping:
            parts.append("clipped")
        if self.drift_ppm:
            parts.append(f"drift {self.drift_ppm:+.0f} ppm")
        return ", ".join(parts)


def _say(text: str, voice: str) -> np.ndarray:
    samples, rate = speech(text, voice)
    return soxr.resample(samples.astype(np.float32) / 32768, rate, RATE).astype(np.float32)


def draw_room(rng: np.random.Generator, i: int, *, drift: bool) -> Room:
    return Room(
        delay_ms=float(rng.uniform(20, 450)),
        gain=float(rng.uniform(0.3, 1.0)),
        rt60=float(rng.uniform(0.15, 0.4)),
        drr_db=float(rng.uniform(3, 12)),
        clipping=i % 2 == 1,
        drift_ppm=float(rng.choice([-100.0, 100.0])) if drift else 0.0,
    )


def impulse_response(room: Room, rng: np.random.Generator) -> np.ndarray:
    """Direct sound, a few early reflections, then diffuse noise decaying by 60 dB in RT60."""
    n = int(room.rt60 * RATE)
    t = np.arange(n) / RATE
    tail = rng.normal(0, 1, n) * 10 ** (-3 * t / room.rt60)
    tail[: int(0.005 * RATE)] = 0  # the diffuse part starts after the first reflections
    # scaled to the direct sound's energy over the direct-to-reverberant ratio
    response = tail * np.sqrt(10 ** (-room.drr_db / 10) / np.sum(tail**2))
    response[0] = 1.0
    for _ in range(4):
        at = int(rng.uniform(0.002, 0.03) * RATE)
        response[at] += rng.uniform(-0.4, 0.4)
    return response


def through_room(played: np.ndarray, room: Room, rng: np.random.Generator) -> np.ndarray:
    """What the microphone hears of `played` (the room's noise added by the caller)."""
    driven = played
    if room.clipping:  # a small speaker pushed hard: soft clipping near full scale
        driven = np.tanh(2.5 * played) / 2.5
    wet = np.convolve(driven, impulse_response(room, rng))[: played.size] * room.gain
    if room.drift_ppm:  # the microphone's clock runs at another rate than the player's
        at = np.arange(played.size) * (1 + room.drift_ppm * 1e-6)
        wet = np.interp(at, np.arange(played.size), wet, right=0.0)
    late = int(room.delay_ms * RATE / 1000)
    return np.concatenate([np.zeros(late), wet])[: played.size].astype(np.float32)


def cancel(mic: np.ndarray, played: np.ndarray) -> tuple[np.ndarray, float]:
    """The microphone through a fresh canceller, blocks in device order; (out, seconds)."""
    canceller = EchoCanceller(RATE)
    out, played_upto = [], 0
    t0 = time.perf_counter()
    for start in range(0, mic.size - MIC_BLOCK + 1, MIC_BLOCK):
        while played_upto < start + MIC_BLOCK:  # the player runs a block ahead
            canceller.played(played[played_upto : played_upto + PLAY_BLOCK])
            played_upto += PLAY_BLOCK
        canceller.captured(MIC_BLOCK)
        out.append(canceller.process(mic[start : start + MIC_BLOCK]))
    return np.concatenate(out), time.perf_counter() - t0


def regions(samples: np.ndarray) -> list[tuple[float, float]]:
    audio = soxr.resample(samples.astype(np.float32), RATE, VAD_RATE)
    return [(a / VAD_RATE, b / VAD_RATE) for a, b in speech_regions(audio)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clips", type=int, default=20, help="clips in each set")
    parser.add_argument(
        "--drift-clips", type=int, default=10, help="clips in each set with clock drift"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("-v", "--verbose", action="store_true", help="a line per clip")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)

    print("synthesizing speech ...", file=sys.stderr)
    answers = [_say(s, v) for s in SENTENCES for v in ANSWER_VOICES]
    users = [_say(s, v) for s in SENTENCES for v in USER_VOICES]
    gap = np.zeros(RATE, np.float32)

    def conversation(k: int, n: int) -> tuple[np.ndarray, int]:
        """`n` answers with a second's gap after each; (samples, where the last starts)."""
        said = [answers[(k + 7 * j) % len(answers)] for j in range(n)]
        played = np.concatenate([part for answer in said for part in (answer, gap)])
        return played, played.size - said[-1].size - gap.size

    def clip(i: int, kind: str, room: Room) -> dict:
        """One clip through the room, counted with and without the canceller. Drifting
        clocks take seconds of echo to measure: those clips hold three answers, not two."""
        nonlocal compute, audio
        played, last_at = conversation(
            i + (0 if kind == "echo only" else 3), 3 if room.drift_ppm else 2
        )
        mic = through_room(played, room, rng)
        mic += rng.normal(0, NOISE, mic.size).astype(np.float32)
        onset = None
        if kind == "barge-in":
            user = users[(5 * i + 1) % len(users)] * float(rng.uniform(0.5, 1.0))
            start = last_at + int(rng.uniform(0.2, 1.5) * RATE)
            end = min(mic.size, start + user.size)
            mic[start:end] += user[: end - start]
            voiced = np.flatnonzero(np.abs(user) > 0.02)
            onset = (start + int(voiced[0])) / RATE
        out, seconds = cancel(mic, played)
        compute += seconds
        audio += mic.size / RATE
        row: dict = {"room": room.describe(), "onset": None if onset is None else round(onset, 2)}
        for label, signal in (("with AEC", out), ("without AEC", mic)):
            found = regions(signal)
            if onset is None:
                ok = not found  # the echo alone: no speech may be found
            else:  # the first speech found is the user's (the VAD pads 300 ms before it)
                ok = bool(found) and abs(found[0][0] + 0.3 - onset) <= FOUND_WITHIN
            row[label] = {"ok": ok, "speech": [(round(a, 2), round(b, 2)) for a, b in found]}
        if args.verbose:
            print(kind, row, file=sys.stderr)
        return row

    compute = audio = 0.0
    sets = {
        "echo only": ("echo only", False, args.clips),
        "barge-in": ("barge-in", False, args.clips),
        "echo only, clock drift": ("echo only", True, args.drift_clips),
        "barge-in, clock drift": ("barge-in", True, args.drift_clips),
    }
    results = {}
    for name, (kind, drift, n) in sets.items():
        rows = [clip(i, kind, draw_room(rng, i, drift=drift)) for i in range(n)]
        results[name] = {
            "clips": n,
            "with AEC": sum(r["with AEC"]["ok"] for r in rows),
            "without AEC": sum(r["without AEC"]["ok"] for r in rows),
            "rows": rows,
        }
    cost = compute / audio
    if args.json:
        print(json.dumps({"results": results, "aec_cost_realtime": cost}))
        return 0
    print(f"{'':40} {'with AEC':>9} {'without AEC':>12}  target")
    for name, result in results.items():
        n = result["clips"]
        if not n:
            continue
        if name.startswith("echo only"):
            label, target = "false barge-ins", "0"
            good, bare = n - result["with AEC"], n - result["without AEC"]
        else:
            label, target = "real barge-ins found", f">= {n - 1}"
            good, bare = result["with AEC"], result["without AEC"]
        suffix = ", drift" if "drift" in name else ""
        if suffix:
            target = "(over a third answer: the drift is measured first)"
        print(f"{label + suffix:40} {good:>5} / {n:<2} {bare:>7} / {n:<2}  {target}")
    print(f"canceller cost: {cost * 100:.1f} % of one core (numpy, 24 kHz)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
