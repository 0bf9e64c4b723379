"""The conversation session's settings (`session.type: "realtime"`) in OpenAI's GA shape.

Input audio settings are the transcription session's (the same merge rules, see
`transcription_config`), except that turn detection defaults to `server_vad` with
`create_response` and `interrupt_response` on, as OpenAI's conversation sessions do. Output
settings pick what a response makes: text, or speech (eSpeak NG) with its transcript.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from .events import ProtocolError
from .transcription_config import MAX_RATE, MIN_RATE, TranscriptionConfig
from .transcription_config import merge as merge_input

DEFAULT_VOICE = "alloy"
MAX_OUTPUT_TOKENS = 4096  # OpenAI's bound for an integer max_output_tokens
DEFAULT_INSTRUCTIONS = (
    "You are a helpful voice assistant. Answer briefly, in plain spoken sentences."
)


def default_turn_detection() -> dict[str, Any]:
    return {
        "type": "server_vad",
        "threshold": 0.5,
        "prefix_padding_ms": 300,
        "silence_duration_ms": 500,
        "create_response": True,
        "interrupt_response": True,
    }


@dataclass
class OutputConfig:
    """What a response makes; `response.create` may override each field for one response."""

    modalities: list[str] = field(default_factory=lambda: ["audio"])
    instructions: str = DEFAULT_INSTRUCTIONS
    max_output_tokens: int | None = None  # None: "inf"
    voice: str = DEFAULT_VOICE
    rate: int = 24000
    speed: float = 1.0
    temperature: float | None = None  # llamactl extension; None: the server's default


@dataclass
class RealtimeConfig:
    model: str
    input: TranscriptionConfig
    output: OutputConfig = field(default_factory=OutputConfig)

    @property
    def create_response(self) -> bool:
        td = self.input.turn_detection
        return td is not None and td.get("create_response", True) is not False

    @property
    def interrupt_response(self) -> bool:
        td = self.input.turn_detection
        return td is not None and td.get("interrupt_response", True) is not False

    def to_session(self, session_id: str) -> dict[str, Any]:
        inp = self.input.to_session(session_id)["audio"]["input"]
        out = self.output
        return {
            "object": "realtime.session",
            "type": "realtime",
            "id": session_id,
            "model": self.model,
            "output_modalities": list(out.modalities),
            "instructions": out.instructions,
            "audio": {
                "input": inp,
                "output": {
                    "format": {"type": "audio/pcm", "rate": out.rate},
                    "voice": out.voice,
                    "speed": out.speed,
                },
            },
            "max_output_tokens": "inf" if out.max_output_tokens is None else out.max_output_tokens,
            "tool_choice": "auto",
            "tools": [],
            "tracing": None,
            "truncation": "auto",
            "include": list(self.input.include) or None,
            "temperature": out.temperature,
        }


def new_config(model: str, transcriber: str) -> RealtimeConfig:
    inp = TranscriptionConfig(model=transcriber, turn_detection=default_turn_detection())
    return RealtimeConfig(model=model, input=inp)


def merge(
    config: RealtimeConfig,
    session: dict[str, Any],
    known_transcribers: set[str],
    known_models: set[str],
) -> RealtimeConfig:
    """`config` with a `session.update`'s `session` applied (whole, or ProtocolError)."""
    new = copy.deepcopy(config)
    td_before = new.input.turn_detection
    new.input = merge_input(new.input, session, known_transcribers)
    td = _raw_turn_detection(session)
    if new.input.turn_detection is not None and td is not None:
        # OpenAI's conversation defaults for what the update leaves out
        for key in ("create_response", "interrupt_response"):
            value = td.get(key, (td_before or {}).get(key, True))
            if not isinstance(value, bool):
                raise ProtocolError(
                    f"session.audio.input.turn_detection.{key} must be a boolean",
                    param=f"session.audio.input.turn_detection.{key}",
                )
            new.input.turn_detection[key] = value
    if session.get("model") not in (None, "") and session["model"] not in known_models:
        raise ProtocolError(
            f"unknown model '{session['model']}'; this server answers with '{new.model}'",
            param="session.model",
        )
    for key in ("tools", "tool_choice"):
        if session.get(key) not in (None, [], "auto", "none"):
            raise ProtocolError(
                "function tools are not supported in realtime conversation sessions yet",
                code="unsupported_feature",
                param=f"session.{key}",
            )
    apply_output(new.output, session, "session")
    audio = session.get("audio") or {}
    output = audio.get("output") if isinstance(audio, dict) else None
    if output is not None:
        apply_audio_output(new.output, output, "session.audio.output")
    return new


def _raw_turn_detection(session: dict[str, Any]) -> dict[str, Any] | None:
    audio = session.get("audio")
    inp = audio.get("input") if isinstance(audio, dict) else None
    td = inp.get("turn_detection") if isinstance(inp, dict) else None
    return td if isinstance(td, dict) else None


def apply_output(out: OutputConfig, fields: dict[str, Any], where: str) -> None:
    """The output fields a session and a `response.create` share."""
    if "output_modalities" in fields and fields["output_modalities"] is not None:
        out.modalities = modalities(fields["output_modalities"], f"{where}.output_modalities")
    if "instructions" in fields and fields["instructions"] is not None:
        if not isinstance(fields["instructions"], str):
            raise ProtocolError(
                f"{where}.instructions must be a string", param=f"{where}.instructions"
            )
        out.instructions = fields["instructions"]
    if "max_output_tokens" in fields:
        out.max_output_tokens = max_tokens(fields["max_output_tokens"], where)
    if "temperature" in fields and fields["temperature"] is not None:
        t = fields["temperature"]
        if isinstance(t, bool) or not isinstance(t, int | float) or not 0.0 <= t <= 2.0:
            raise ProtocolError(
                f"{where}.temperature must be between 0 and 2, got {t!r}",
                param=f"{where}.temperature",
            )
        out.temperature = float(t)


def apply_audio_output(out: OutputConfig, value: Any, where: str) -> None:
    if value is None:
        return
    if not isinstance(value, dict):
        raise ProtocolError(f"{where} must be an object", param=where)
    fmt = value.get("format")
    if fmt is not None:
        if not isinstance(fmt, dict):
            raise ProtocolError(f"{where}.format must be an object", param=f"{where}.format")
        kind = fmt.get("type", "audio/pcm")
        if kind != "audio/pcm":
            raise ProtocolError(
                f"output audio format '{kind}' is not supported; use audio/pcm (PCM16 LE mono)",
                param=f"{where}.format.type",
            )
        rate = fmt.get("rate", out.rate)
        if isinstance(rate, bool) or not isinstance(rate, int) or not MIN_RATE <= rate <= MAX_RATE:
            raise ProtocolError(
                f"{where}.format.rate must be an integer between {MIN_RATE} and {MAX_RATE}, "
                f"got {rate!r}",
                param=f"{where}.format.rate",
            )
        out.rate = rate
    voice = value.get("voice")
    if voice is not None:
        if isinstance(voice, dict):
            voice = voice.get("id")
        if not isinstance(voice, str) or not voice:
            raise ProtocolError(f"{where}.voice must be a voice name", param=f"{where}.voice")
        out.voice = voice
    speed = value.get("speed")
    if speed is not None:
        if isinstance(speed, bool) or not isinstance(speed, int | float) or not 0.25 <= speed <= 4:
            raise ProtocolError(
                f"{where}.speed must be between 0.25 and 4, got {speed!r}", param=f"{where}.speed"
            )
        out.speed = float(speed)


def modalities(value: Any, param: str) -> list[str]:
    if value in (["text"], ["audio"]):
        return list(value)
    if isinstance(value, list) and sorted(value) == ["audio", "text"]:
        return ["audio"]  # OpenAI: audio output always carries its text transcript
    raise ProtocolError(f'{param} must be ["text"] or ["audio"], got {value!r}', param=param)


def max_tokens(value: Any, where: str) -> int | None:
    if value is None or value == "inf":
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_OUTPUT_TOKENS:
        raise ProtocolError(
            f"{where}.max_output_tokens must be an integer from 1 to {MAX_OUTPUT_TOKENS} or "
            f"'inf', got {value!r}",
            param=f"{where}.max_output_tokens",
        )
    return value
