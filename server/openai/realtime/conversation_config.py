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

from llamactl.realtime import protocol

from .transcription_config import TranscriptionConfig, apply_input

DEFAULT_VOICE = "alloy"
DEFAULT_INSTRUCTIONS = (
    "You are a helpful voice assistant. Answer briefly, in plain spoken sentences."
)


def default_turn_detection() -> dict[str, Any]:
    return {**protocol.SERVER_VAD, "create_response": True, "interrupt_response": True}


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
    # llamactl extension: thinking tokens before the engine closes the thinking itself
    # (-1: no bound; None: the server's --reasoning-budget)
    reasoning_budget: int | None = None


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
            "reasoning_budget": out.reasoning_budget,
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
    body = protocol.RealtimeSession.parse(
        session,
        {
            "transcribers": known_transcribers,
            "transcriber": config.input.model,
            "models": known_models,
            "model": config.model,
        },
    )
    new = copy.deepcopy(config)
    td_before = new.input.turn_detection
    inp = body.audio.input if body.audio else None
    apply_input(new.input, inp)
    if "include" in body.model_fields_set:
        new.input.include = list(body.include or [])
    td = inp.turn_detection if inp is not None else None
    if new.input.turn_detection is not None and td is not None:
        # OpenAI's conversation defaults for what the update leaves out
        for key in ("create_response", "interrupt_response"):
            if key in td.model_fields_set:
                new.input.turn_detection[key] = getattr(td, key)
            else:
                new.input.turn_detection[key] = (td_before or {}).get(key, True)
    apply_output(new.output, body)
    if body.audio is not None:
        apply_audio_output(new.output, body.audio.output)
    return new


def apply_output(
    out: OutputConfig, fields: protocol.RealtimeSession | protocol.ResponseParams
) -> None:
    """The output fields a session and a `response.create` share (sent ones only)."""
    sent = fields.model_fields_set
    if "output_modalities" in sent and fields.output_modalities is not None:
        out.modalities = list(fields.output_modalities)
    if "instructions" in sent and fields.instructions is not None:
        out.instructions = fields.instructions
    if "max_output_tokens" in sent:
        tokens = fields.max_output_tokens
        out.max_output_tokens = None if tokens == "inf" else tokens
    if "temperature" in sent and fields.temperature is not None:
        out.temperature = fields.temperature
    if "reasoning_budget" in sent:
        out.reasoning_budget = fields.reasoning_budget


def apply_audio_output(out: OutputConfig, value: protocol.AudioOutput | None) -> None:
    if value is None:
        return
    if value.format is not None and "rate" in value.format.model_fields_set:
        out.rate = value.format.rate
    if value.voice is not None:
        out.voice = value.voice
    if value.speed is not None:
        out.speed = value.speed
