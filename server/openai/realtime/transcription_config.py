"""The transcription session's settings in OpenAI's GA shape, and `session.update` merging.

An update is validated whole (`protocol.TranscriptionSession`) before anything of it is
applied to a copy, so a refused update changes nothing. Fields the
server does not act on (noise reduction, logprobs) are accepted and reported as what is in
effect (`null`), so clients written for OpenAI keep working and can see the difference.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from typing import Any

from llamactl import SemanticTurn, VadConfig, semantic_turn
from llamactl.realtime import protocol
from llamactl.realtime.protocol import DEFAULT_RATE


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

    def semantic(self) -> SemanticTurn | None:
        """The semantic end-of-turn rule (`semantic_vad`), or None (server_vad, or none)."""
        td = self.turn_detection or {}
        if td.get("type") != "semantic_vad":
            return None
        return semantic_turn(td.get("eagerness", "auto"))

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
    body = protocol.TranscriptionSession.parse(
        session, {"transcribers": known_models, "transcriber": config.model}
    )
    new = copy.deepcopy(config)
    apply_input(new, body.audio.input if body.audio else None)
    if "include" in body.model_fields_set:
        new.include = list(body.include or [])
    return new


def apply_input(new: TranscriptionConfig, inp: protocol.AudioInput | None) -> None:
    """The `audio.input` fields an update sent (left out: unchanged)."""
    if inp is None:
        return
    sent = inp.model_fields_set
    if "format" in sent and inp.format is not None and "rate" in inp.format.model_fields_set:
        new.rate = inp.format.rate
    if "transcription" in sent and inp.transcription is not None:
        value = inp.transcription
        if "language" in value.model_fields_set:
            new.language = value.language or None
        if "prompt" in value.model_fields_set:
            new.prompt = value.prompt or ""
    if "turn_detection" in sent:
        td = inp.turn_detection
        new.turn_detection = None if td is None else _turn_detection(td)


def _turn_detection(td: protocol.TurnDetection | protocol.SemanticTurnDetection) -> dict[str, Any]:
    if isinstance(td, protocol.SemanticTurnDetection):
        out: dict[str, Any] = td.model_dump(include={"type", "eagerness"})
        kept: tuple[str, ...] = ("create_response", "interrupt_response")
    else:
        out = td.model_dump(
            include={"type", "threshold", "prefix_padding_ms", "silence_duration_ms"}
        )
        kept = ("create_response", "interrupt_response", "idle_timeout_ms")
    for key in kept:
        if key in td.model_fields_set:
            out[key] = getattr(td, key)  # conversation settings: kept, meaningless here
    return out
