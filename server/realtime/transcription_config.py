"""The transcription session's settings in OpenAI's GA shape, and `session.update` merging.

An update is validated whole into a copy, so a refused update changes nothing. Fields the
server does not act on (noise reduction, logprobs) are accepted and reported as what is in
effect (`null`), so clients written for OpenAI keep working and can see the difference.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from typing import Any

from llamactl import ProtocolError, VadConfig

DEFAULT_RATE = 24000  # OpenAI's fixed input rate; other rates are accepted as an extension
MIN_RATE, MAX_RATE = 8000, 48000


@dataclass
class TranscriptionConfig:
    model: str
    rate: int = DEFAULT_RATE
    language: str | None = None
    prompt: str = ""
    turn_detection: dict[str, Any] | None = None
    include: list[str] = field(default_factory=list)

    def vad(self) -> VadConfig:
        td = self.turn_detection or {}
        base = VadConfig()
        return replace(
            base,
            threshold=td.get("threshold", base.threshold),
            prefix_padding_ms=td.get("prefix_padding_ms", base.prefix_padding_ms),
            silence_duration_ms=td.get("silence_duration_ms", base.silence_duration_ms),
        )

    def to_session(self, session_id: str) -> dict[str, Any]:
        return {
            "object": "realtime.session",
            "type": "transcription",
            "id": session_id,
            "audio": {
                "input": {
                    "format": {"type": "audio/pcm", "rate": self.rate},
                    "transcription": {
                        "model": self.model,
                        "prompt": self.prompt,
                        "language": self.language,
                    },
                    "turn_detection": copy.deepcopy(self.turn_detection),
                    "noise_reduction": None,
                }
            },
            "include": list(self.include) or None,
        }


def merge(
    config: TranscriptionConfig, session: dict[str, Any], known_models: set[str]
) -> TranscriptionConfig:
    """`config` with a `session.update`'s `session` applied, or ProtocolError."""
    new = copy.deepcopy(config)
    audio = _object(session, "audio", "session.audio")
    inp = _object(audio, "input", "session.audio.input") if audio else None
    if inp:
        if "format" in inp:
            new.rate = _format_rate(inp["format"], new.rate)
        if "transcription" in inp:
            _transcription(new, inp["transcription"], known_models)
        if "turn_detection" in inp:
            new.turn_detection = _turn_detection(inp["turn_detection"])
    if "include" in session:
        include = session["include"] or []
        if not isinstance(include, list) or not all(isinstance(x, str) for x in include):
            raise ProtocolError(
                "session.include must be a list of strings", param="session.include"
            )
        new.include = include
    return new


def _object(parent: dict[str, Any], key: str, param: str) -> dict[str, Any] | None:
    value = parent.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ProtocolError(f"{param} must be an object", param=param)
    return value


def _format_rate(fmt: Any, current: int) -> int:
    param = "session.audio.input.format"
    if fmt is None:
        return current
    if not isinstance(fmt, dict):
        raise ProtocolError(f"{param} must be an object", param=param)
    kind = fmt.get("type", "audio/pcm")
    if kind != "audio/pcm":
        raise ProtocolError(
            f"input audio format '{kind}' is not supported; send audio/pcm (PCM16 LE mono)",
            param=f"{param}.type",
        )
    rate = fmt.get("rate", current)
    if not isinstance(rate, int) or isinstance(rate, bool) or not MIN_RATE <= rate <= MAX_RATE:
        raise ProtocolError(
            f"{param}.rate must be an integer between {MIN_RATE} and {MAX_RATE}, got {rate!r}",
            param=f"{param}.rate",
        )
    return rate


def _transcription(new: TranscriptionConfig, value: Any, known_models: set[str]) -> None:
    param = "session.audio.input.transcription"
    if value is None:
        return
    if not isinstance(value, dict):
        raise ProtocolError(f"{param} must be an object", param=param)
    model = value.get("model")
    if model not in (None, "") and model not in known_models:
        raise ProtocolError(
            f"unknown transcription model '{model}'; this server transcribes with '{new.model}'",
            param=f"{param}.model",
        )
    if "language" in value:
        language = value["language"]
        if language is not None and not isinstance(language, str):
            raise ProtocolError(f"{param}.language must be a string", param=f"{param}.language")
        new.language = language or None
    if "prompt" in value:
        prompt = value["prompt"]
        if prompt is not None and not isinstance(prompt, str):
            raise ProtocolError(f"{param}.prompt must be a string", param=f"{param}.prompt")
        new.prompt = prompt or ""


def _turn_detection(value: Any) -> dict[str, Any] | None:
    param = "session.audio.input.turn_detection"
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ProtocolError(f"{param} must be an object or null", param=param)
    kind = value.get("type", "server_vad")
    if kind != "server_vad":
        raise ProtocolError(
            f"turn detection '{kind}' is not supported; use server_vad or null",
            param=f"{param}.type",
        )
    out: dict[str, Any] = {"type": "server_vad"}
    checks = {
        "threshold": (0.0, 1.0, 0.5),
        "prefix_padding_ms": (0, 5000, 300),
        "silence_duration_ms": (100, 10000, 500),
    }
    for key, (low, high, default) in checks.items():
        got = value.get(key, default)
        if got is None:
            got = default
        if isinstance(got, bool) or not isinstance(got, int | float) or not low <= got <= high:
            raise ProtocolError(
                f"{param}.{key} must be between {low} and {high}, got {got!r}",
                param=f"{param}.{key}",
            )
        out[key] = got if key == "threshold" else int(got)
    for key in ("create_response", "interrupt_response", "idle_timeout_ms"):
        if key in value:
            out[key] = value[key]  # conversation settings: kept, meaningless here
    return out
