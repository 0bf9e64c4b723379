"""OpenAI's voice names, for `/v1/audio/speech` and the Realtime API's `voice`."""

from __future__ import annotations

__all__ = ["OPENAI_VOICES", "openai_voice"]

# OpenAI's voice names, spoken by eSpeak NG variants so each name sounds distinct and stable.
OPENAI_VOICES = {
    "alloy": "en-us",
    "ash": "en-us+m3",
    "ballad": "en-gb+m2",
    "coral": "en-us+f2",
    "echo": "en-us+m1",
    "fable": "en-gb",
    "nova": "en-us+f3",
    "onyx": "en-us+m7",
    "sage": "en-gb+f2",
    "shimmer": "en-us+f4",
    "verse": "en-us+m2",
    "marin": "en-us+f1",
    "cedar": "en-us+m4",
}


def openai_voice(name: str | None) -> str | None:
    """OpenAI names map to eSpeak NG voices; anything else goes to the synthesizer, which
    accepts only names from its own list (a 400 otherwise)."""
    if name is None:
        return None
    return OPENAI_VOICES.get(name.lower(), name)
