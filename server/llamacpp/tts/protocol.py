"""`/tts`'s request shape and its JSON-or-multipart field parsing.

`/tts` follows llama-server: wrong types are 400 naming the field, and since form fields all
arrive as strings, `seed` (a long long) and `stream` are coerced from them; `speed` too, as it
is llamactl's own addition. Unknown fields are ignored, as llama-server does.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

from ...errors import bad_request

LONG_LONG = (-(2**63), 2**63 - 1)
# /tts (llama-server has no limit): about 15 minutes of speech. eSpeak speaks one request at a
# time and a WAV answer is held whole, so an unbounded text would hold every voice for hours.
MAX_TTS_INPUT = 16384
_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")


class TTSBody(BaseModel):
    """`POST /tts` (JSON, or the same fields as multipart/form-data)."""

    input: str = Field(description="Text to speak.")
    speaker_ref: str | None = Field(
        None,
        description="Reference voice to clone: base64 audio in JSON, or a file part in "
        "multipart. eSpeak NG cannot clone, so a server without a cloning model answers 501.",
    )
    seed: int | None = Field(None, description="Sampling seed (eSpeak NG is deterministic).")
    stream: bool = Field(False, description="Stream raw PCM (s16le mono) instead of a WAV file.")
    voice: str | None = Field(None, description="llamactl extension: a voice name.")
    speed: float = Field(1.0, description="llamactl extension: speaking rate, 0.25 to 4.0.")
    model: str | None = Field(None, description="Accepted for routers; ignored here.")


@dataclass
class TTSRequest:
    input: str
    speaker_ref: bytes | None = None
    seed: int | None = None
    stream: bool = False
    voice: str | None = None
    speed: float = 1.0


def parse_tts(fields: dict[str, Any], *, form: bool) -> TTSRequest:
    """Validate `/tts` fields; `form` marks string values that may be coerced."""
    text = fields.get("input")
    if text is None:
        raise bad_request("Field 'input' is required")
    if not isinstance(text, str):
        raise bad_request("Field 'input': expected a string")
    if not text.strip():
        raise bad_request("Field 'input': must not be empty")
    if len(text) > MAX_TTS_INPUT:
        raise bad_request(
            f"Field 'input': at most {MAX_TTS_INPUT} characters on /tts, got {len(text)}"
        )
    voice = fields.get("voice")
    if voice is not None and not isinstance(voice, str):
        raise bad_request("Field 'voice': expected a string")
    return TTSRequest(
        input=text,
        speaker_ref=_speaker_ref(fields.get("speaker_ref")),
        seed=_seed(fields.get("seed"), form),
        stream=_stream(fields.get("stream"), form),
        voice=voice or None,
        speed=_speed(fields.get("speed"), form),
    )


def _seed(value: Any, form: bool) -> int | None:
    if value is None:
        return None
    if form and isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise bad_request(f"Field 'seed': expected an integer, got '{value}'") from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_request("Field 'seed': expected an integer")
    if not LONG_LONG[0] <= value <= LONG_LONG[1]:
        raise bad_request(f"Field 'seed': {value} does not fit a 64-bit integer")
    return value


def _stream(value: Any, form: bool) -> bool:
    if value is None:
        return False
    if form and isinstance(value, str):
        if value.strip().lower() in _TRUE:
            return True
        if value.strip().lower() in _FALSE:
            return False
        raise bad_request(f"Field 'stream': expected true or false, got '{value}'")
    if not isinstance(value, bool):
        raise bad_request("Field 'stream': expected a boolean")
    return value


def _speed(value: Any, form: bool) -> float:
    if value is None:
        return 1.0
    if form and isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise bad_request(f"Field 'speed': expected a number, got '{value}'") from None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise bad_request("Field 'speed': expected a number")
    if not 0.25 <= value <= 4.0:
        raise bad_request(f"Field 'speed': must be between 0.25 and 4.0, got {value}")
    return float(value)


def _speaker_ref(value: Any) -> bytes | None:
    """A form upload arrives as bytes; JSON carries base64 (a data: URL is accepted too)."""
    if value is None or value == "":
        return None
    if isinstance(value, bytes):
        data = value
    elif isinstance(value, str):
        encoded = value.split(",", 1)[1] if value.startswith("data:") else value
        try:
            data = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise bad_request("Field 'speaker_ref': expected base64-encoded audio") from None
    else:
        raise bad_request("Field 'speaker_ref': expected a file or base64-encoded audio")
    if not data:
        raise bad_request("Field 'speaker_ref': the audio is empty")
    return data
