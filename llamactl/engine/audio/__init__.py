"""Speech in: transcribers (faster-whisper, llama.cpp `mtmd`), streaming transcription, VAD,
semantic turn detection (Smart Turn).

Only this package touches the speech runtimes; front ends use `AudioService` (one compute
thread shared by every stream and batch request) and the event types in `types`.
"""

from __future__ import annotations

from .semantic import EAGERNESS, SemanticTurn, semantic_turn
from .service import AudioService
from .stream import TranscriptionStream
from .transcriber import Transcriber
from .turn import SmartTurn
from .types import (
    Cleared,
    Committed,
    Completed,
    Final,
    Partial,
    Segment,
    SpeechStarted,
    SpeechStopped,
    StreamEvent,
    StreamFailed,
    Tentative,
)
from .vad import VadConfig

__all__ = [
    "EAGERNESS",
    "AudioService",
    "Cleared",
    "Committed",
    "Completed",
    "Final",
    "Partial",
    "Tentative",
    "Segment",
    "SemanticTurn",
    "SmartTurn",
    "SpeechStarted",
    "SpeechStopped",
    "StreamEvent",
    "StreamFailed",
    "Transcriber",
    "TranscriptionStream",
    "VadConfig",
    "semantic_turn",
]
