"""The machine's audio devices: microphone capture and sound output (sounddevice, PortAudio).

The echo canceller (`echo.py`) takes what the player played out of what the microphone hears.
Outside the engine, which only computes: the CLI (`transcribe --mic`, `tts --play`) and the
TUI open devices through this package, and a missing PortAudio is one clear error here.
"""

from __future__ import annotations

from .capture import PORTAUDIO_HINT, Microphone, input_devices, sounddevice_module
from .echo import EchoCanceller
from .playback import (
    RATE,
    BlockingPlayer,
    CountingPlayer,
    Player,
    SoundDevicePlayer,
    open_player,
    output_stream,
)

__all__ = [
    "PORTAUDIO_HINT",
    "RATE",
    "BlockingPlayer",
    "CountingPlayer",
    "EchoCanceller",
    "Microphone",
    "Player",
    "SoundDevicePlayer",
    "input_devices",
    "open_player",
    "output_stream",
    "sounddevice_module",
]
