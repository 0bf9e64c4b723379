"""Choosing and loading a transcriber from a name or path (`--transcribe-model`, `--model`).

- nothing, `whisper-tiny.en`, `tiny.en`, or an OpenAI model name (`whisper-1`...): the
  embedded Whisper tiny.en;
- `whisper-base` or `base`: Whisper base (multilingual, more accurate, ~1.6x the compute), from
  the optional `speech-base` packages;
- a directory with `model.bin`: a CTranslate2 Whisper model for faster-whisper;
- a `.gguf` file: a llama.cpp audio model through `mtmd`; its mmproj is `mmproj`, or the one
  `mmproj*.gguf` file beside it.
"""

from __future__ import annotations

from pathlib import Path

from llamactl.core.errors import ModelNotFoundError

from .transcriber import Transcriber

BASE_ALIASES = frozenset({"whisper-base", "base"})
EMBEDDED_ALIASES = frozenset(
    {
        "",
        "whisper-tiny.en",
        "tiny.en",
        "whisper",
        "whisper-1",
        "gpt-4o-transcribe",
        "gpt-4o-mini-transcribe",
        "gpt-4o-transcribe-latest",
        "gpt-transcribe",
        "gpt-live-transcribe",
        "gpt-realtime-whisper",
    }
)


def load_transcriber(
    model: str | Path | None = None, *, mmproj: str | Path | None = None, threads: int = 0
) -> Transcriber:
    name = "" if model is None else str(model).strip()
    if name in EMBEDDED_ALIASES:
        from .whisper import FasterWhisperTranscriber

        return FasterWhisperTranscriber(threads=threads)
    if name in BASE_ALIASES:
        from .whisper import BASE_NAME, FasterWhisperTranscriber

        return FasterWhisperTranscriber(threads=threads, name=BASE_NAME)
    path = Path(name).expanduser()
    if path.is_dir():
        from .whisper import FasterWhisperTranscriber

        return FasterWhisperTranscriber(path, threads=threads)
    if path.suffix.lower() == ".gguf":
        from .mtmd import MtmdTranscriber

        return MtmdTranscriber(path, mmproj or find_mmproj(path), threads=threads)
    if not path.exists():
        raise ModelNotFoundError(
            f"speech model not found: {name} (give whisper-tiny.en, whisper-base, a "
            "CTranslate2 Whisper directory, or a llama.cpp audio model .gguf with its mmproj)"
        )
    raise ModelNotFoundError(f"{path} is not a speech model llamactl can load")


def find_mmproj(model: Path) -> Path:
    """The single `mmproj*.gguf` beside `model`, or a clear error."""
    candidates = sorted(p for p in model.parent.glob("*.gguf") if "mmproj" in p.name.lower())
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        raise ModelNotFoundError(
            f"{model.name} needs an mmproj file with an audio encoder; none found beside it "
            "(set transcribe_mmproj)"
        )
    names = ", ".join(p.name for p in candidates)
    raise ModelNotFoundError(
        f"several mmproj files beside {model.name} ({names}); set transcribe_mmproj"
    )
