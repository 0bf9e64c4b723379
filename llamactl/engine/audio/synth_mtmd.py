"""llama.cpp TTS models (Qwen3-TTS, pocket-tts) through `mtmd`: detection and refusals.

A llama.cpp TTS model is a backbone GGUF plus an mmproj holding the audio generator. The
pinned llama-cpp-python (0.3.36) binds llama.cpp's audio-generation API
(`mtmd_gen_audio_get_info`, `mtmd_helper_gen_audio_*`), so whether a pair of files can speak
is asked of llama.cpp itself: the files are checked (so a wrong file is refused with a
message, not a native abort), the mmproj is loaded against the backbone with
`mtmd_init_from_file`, and `mtmd_gen_audio_get_info` names its generator.

What is not done: driving the generation loop. No TTS model can be fetched offline, so the
loop could not be run once against a real model, and llamactl ships no synthesis path it has
never run; a model that has a generator is detected and refused with a message that says so.
Every refusal is a `CannotSpeakError`: HTTP 501 on `/tts` and `/v1/audio/speech`, a one-line
message and exit code 1 from `llamactl tts`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from llamactl.core.errors import CannotSpeakError, ModelLoadError, ModelNotFoundError

from .synth import Synthesizer

GENERATORS = {1: "qwen3-tts", 2: "pocket-tts"}  # enum mtmd_gen_audio_type (0: none)


@dataclass(frozen=True)
class TtsInfo:
    generator: str  # "qwen3-tts", "pocket-tts", or "" for none
    sample_rate: int
    variant: str = ""


def probe(model: str | Path, mmproj: str | Path | None) -> TtsInfo:
    """What llama.cpp says the pair can generate; raises for missing or wrong files."""
    from .mtmd import _errors, _quiet_mtmd_log

    model = Path(model)
    if not model.is_file():
        raise ModelNotFoundError(f"TTS model file not found: {model}")
    if mmproj is None:
        raise CannotSpeakError(
            f"{model.name} cannot speak: a llama.cpp TTS model needs the mmproj that holds "
            "its audio generator (--mmproj); without one llamactl speaks with eSpeak NG"
        )
    mmproj = Path(mmproj)
    _check_projector(mmproj)
    import llama_cpp  # noqa: F401 - loads the shared library mtmd needs
    from llama_cpp import mtmd_cpp as mtmd

    from llamactl.engine.model import Model

    backbone = Model(model)
    ctx = None
    try:
        params = mtmd.mtmd_context_params_default()
        params.use_gpu = False
        params.print_timings = False
        params.warmup = False
        params.n_threads = 1
        _quiet_mtmd_log()
        _errors.clear()
        ctx = mtmd.mtmd_init_from_file(str(mmproj).encode(), backbone.handle, params)
        if not ctx:
            why = "; ".join(e for e in _errors if e) or "no detail"
            raise CannotSpeakError(
                f"llama.cpp could not load {mmproj.name} for {model.name}: {why}"
            )
        info = mtmd.mtmd_gen_audio_get_info(ctx)
        variant = info.model_variant.decode("utf-8", "replace") if info.model_variant else ""
        return TtsInfo(GENERATORS.get(int(info.type), ""), int(info.sample_rate), variant)
    finally:
        if ctx:
            mtmd.mtmd_free(ctx)
        backbone.close()


def _check_projector(path: Path) -> None:
    from llamactl.core.gguf_info import read_gguf_info

    if not path.is_file():
        raise ModelNotFoundError(f"mmproj file not found: {path}")
    try:
        info = read_gguf_info(path)
    except ModelLoadError as exc:
        raise CannotSpeakError(str(exc)) from exc
    if info.model_type != "mmproj" and info.architecture != "clip":
        raise CannotSpeakError(
            f"{path.name} is a {info.model_type} file ({info.architecture}), not an mmproj "
            "projector; a TTS model needs the mmproj with its audio generator"
        )


def open_mtmd_synthesizer(model: str | Path, mmproj: str | Path | None = None) -> Synthesizer:
    """The synthesizer for a llama.cpp TTS model, or a CannotSpeakError saying why not."""
    info = probe(model, mmproj)
    name = Path(model).name
    if not info.generator:
        raise CannotSpeakError(
            f"{name} cannot speak: llama.cpp found no audio generator in "
            f"{Path(str(mmproj)).name} (mtmd_gen_audio_get_info: none); it is an input "
            "projector (vision or hearing), not a TTS model"
        )
    raise CannotSpeakError(
        f"{name} is a {info.generator} model ({info.sample_rate} Hz) that llama.cpp can "
        "generate with, but llamactl does not drive mtmd audio generation yet; use the "
        "eSpeak NG voice instead"
    )
