"""Which `voice` strings eSpeak NG may be given: an allow-list built from its own voice data.

`espeak_SetVoiceByName` treats what it is given as a path under its data folder and copies the
variant into a fixed-size buffer, so a raw client string can read any file (and crash the
process on a binary one) or overflow that buffer. Nothing a client sends is ever passed on:
the name is looked up, case-insensitively, among the voices eSpeak lists (their first
language, e.g. `en-us`; the name of their file, e.g. `fr` for `roa/fr`; any other language
they list; their descriptive name, e.g. `English (America)`), the optional `+variant` among
the files of the data's `voices/!v` folder, and eSpeak gets the identifier and file name
found there. Anything else is a 400; file identifiers (`gmw/en`) are not accepted.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from llamactl.core.errors import InvalidRequestError

__all__ = ["MAX_VOICE_CHARS", "ListedVoice", "VoiceNames", "variant_files"]

MAX_VOICE_CHARS = 64  # longer than any listed name plus variant; eSpeak's buffers are ~40-60
_LIST_HINT = "`llamactl tts --list-voices` lists them"


@dataclass(frozen=True)
class ListedVoice:
    """One entry of `espeak_ListVoices`: what eSpeak itself says about a voice."""

    identifier: str  # the voice file, relative to `voices/` (e.g. `gmw/en-US`)
    languages: tuple[str, ...]
    description: str


def variant_files(data_dir: Path) -> list[str]:
    """The variant names eSpeak knows: the files of `voices/!v` in its data folder."""
    folder = data_dir / "voices" / "!v"
    try:
        return sorted(entry.name for entry in os.scandir(folder) if entry.is_file())
    except OSError:
        return []


class VoiceNames:
    """Client voice string -> the bytes `espeak_SetVoiceByName` may be given."""

    def __init__(self, voices: list[ListedVoice], variants: list[str]) -> None:
        self._ids: dict[str, str] = {}
        # listed names first, so another voice's secondary language never shadows them
        for voice in voices:
            if voice.languages:
                self._ids.setdefault(voice.languages[0].lower(), voice.identifier)
        # then the file's own name (`fr` for `roa/fr`), which is the voice eSpeak itself picks
        # for that language, before the languages other voices also claim
        for voice in voices:
            self._ids.setdefault(voice.identifier.rpartition("/")[2].lower(), voice.identifier)
        for voice in voices:
            for name in (*voice.languages[1:], voice.description):
                if name:
                    self._ids.setdefault(name.lower(), voice.identifier)
        self._variants = {name.lower(): name for name in variants}

    def resolve(self, voice: str) -> bytes:
        """`en-us`, `EN-GB+f3`, `English (America)`... -> `gmw/en-US+f3`; InvalidRequestError
        naming the field for anything that is not a known name."""
        if len(voice) > MAX_VOICE_CHARS:
            raise InvalidRequestError(
                f"Field 'voice': at most {MAX_VOICE_CHARS} characters (a voice name with an "
                f"optional +variant), got {len(voice)}; {_LIST_HINT}"
            )
        base, plus, variant = voice.partition("+")
        ident = self._ids.get(base.strip().lower())
        if ident is None:
            raise InvalidRequestError(f"Field 'voice': unknown voice {voice!r}; {_LIST_HINT}")
        if not plus:
            return ident.encode()
        found = self._variants.get(variant.strip().lower())
        if found is None:
            raise InvalidRequestError(
                f"Field 'voice': unknown eSpeak variant {variant!r} in {voice!r}; variants are "
                f"{', '.join(sorted(self._variants.values())[:12])}... (the files of "
                "espeak-ng-data/voices/!v)"
            )
        return f"{ident}+{found}".encode()
