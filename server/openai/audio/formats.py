"""The response formats of `/v1/audio/transcriptions`: json, text, verbose_json, srt, vtt."""

from __future__ import annotations

from typing import Any

from llamactl import Segment

FORMATS = ("json", "text", "srt", "verbose_json", "vtt")
LANGUAGE_NAMES = {"en": "english", "fr": "french", "de": "german", "es": "spanish"}


def _clock(seconds: float, sep: str) -> str:
    ms = int(round(max(0.0, seconds) * 1000))
    h, rem = divmod(ms, 3_600_000)
    m, rem = divmod(rem, 60_000)
    s, ms = divmod(rem, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


def srt(segments: list[Segment]) -> str:
    blocks = [
        f"{i}\n{_clock(s.start, ',')} --> {_clock(s.end, ',')}\n{s.text}\n"
        for i, s in enumerate(segments, start=1)
    ]
    return "\n".join(blocks)


def vtt(segments: list[Segment]) -> str:
    blocks = [f"{_clock(s.start, '.')} --> {_clock(s.end, '.')}\n{s.text}\n" for s in segments]
    return "WEBVTT\n\n" + "\n".join(blocks)


def text_of(segments: list[Segment]) -> str:
    return " ".join(s.text.strip() for s in segments if s.text.strip())


def usage(duration: float) -> dict[str, Any]:
    return {"type": "duration", "seconds": round(duration, 3)}


def verbose_json(segments: list[Segment], duration: float, language: str) -> dict[str, Any]:
    return {
        "task": "transcribe",
        "language": LANGUAGE_NAMES.get(language, language),
        "duration": round(duration, 3),
        "text": text_of(segments),
        "segments": [
            {
                "id": i,
                "seek": 0,
                "start": s.start,
                "end": s.end,
                "text": s.text,
                "tokens": [],
                "temperature": 0.0,
                "avg_logprob": 0.0,
                "compression_ratio": 0.0,
                "no_speech_prob": 0.0,
            }
            for i, s in enumerate(segments)
        ],
        "usage": usage(duration),
    }
