"""Voice activity detection's defaults, once: the engine's VAD, the Realtime protocol's
`server_vad` (OpenAI's values), the server's conversation sessions and llamactl's client all
read them here."""

from __future__ import annotations

__all__ = ["SERVER_VAD", "VAD_PREFIX_PADDING_MS", "VAD_SILENCE_MS", "VAD_THRESHOLD"]

VAD_THRESHOLD = 0.5  # speech probability that starts speech
VAD_PREFIX_PADDING_MS = 300  # audio kept before the detected start
VAD_SILENCE_MS = 500  # silence that ends speech
SERVER_VAD = {
    "type": "server_vad",
    "threshold": VAD_THRESHOLD,
    "prefix_padding_ms": VAD_PREFIX_PADDING_MS,
    "silence_duration_ms": VAD_SILENCE_MS,
}
"""`audio.input.turn_detection` for server VAD with the defaults (copy before changing it)."""
