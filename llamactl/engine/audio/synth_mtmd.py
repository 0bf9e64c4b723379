"""llama.cpp TTS models through `mtmd`: the pocket-tts generation loop.

A llama.cpp TTS model is a backbone GGUF plus an mmproj holding the audio generator. The
pinned llama-cpp-python (0.3.36) binds llama.cpp's audio-generation helper
(`mtmd_helper_gen_audio_*`), which owns each pipeline's model-specific steps (the prompt of
voice, text and audio BOS; one frame of latents from the backbone's hidden state; the codec
that turns frames into PCM). llamactl drives it the way llama.cpp's `llama-tts` does, frame by
frame, and streams the PCM as each frame is decoded.

- Whether a pair of files can speak is asked of llama.cpp itself: the files are checked (a
  wrong file is refused with a message, not a native abort), the mmproj is loaded against the
  backbone, and `mtmd_gen_audio_get_info` names its generator.
- **Seeds.** clip reseeds its noise generator only when the seed it is handed changes, so two
  requests in a row with the same seed would draw different noise. Each request first hands
  it another seed, then its own: the same text, reference and seed give the same samples.
- **One request at a time.** The backbone's KV cache, the helper's frame buffers and clip's
  generator are one per model, so requests take turns (each speaks exactly as it would
  alone); a waiting request starts as soon as the one before it ends or is cancelled.
- Every refusal is a `CannotSpeakError`: HTTP 501 on `/tts` and `/v1/audio/speech`, a one-line
  message and exit code 1 from `llamactl tts`.
"""

from __future__ import annotations

import ctypes as _ctypes
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from llamactl.core.errors import (
    CannotSpeakError,
    InvalidRequestError,
    ModelLoadError,
    ModelNotFoundError,
    UnsupportedVoiceFeature,
)

from .synth import Synthesizer, Voice, check_speed, check_text

GENERATORS = {1: "qwen3-tts", 2: "pocket-tts"}  # enum mtmd_gen_audio_type (0: none)
# the generators whose loop llamactl drives (and tests on a converted model): pocket-tts
# steps from the backbone's hidden state alone; qwen3-tts also needs a sampled codebook token
DRIVEN = ("pocket-tts",)


@dataclass(frozen=True)
class TtsInfo:
    generator: str  # "qwen3-tts", "pocket-tts", or "" for none
    sample_rate: int
    variant: str = ""


def probe(model: str | Path, mmproj: str | Path | None) -> TtsInfo:
    """What llama.cpp says the pair can generate; raises for missing or wrong files."""
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
    from llama_cpp import mtmd_cpp as mtmd

    from llamactl.engine.model import Model
    from llamactl.engine.projector import last_errors, open_mtmd

    backbone = Model(model)
    ctx = None
    try:
        ctx = open_mtmd(mmproj, backbone.handle, n_threads=1)
        if ctx is None:
            raise CannotSpeakError(
                f"llama.cpp could not load {mmproj.name} for {model.name}: {last_errors()}"
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


REFERENCE_SECONDS = (0.5, 29.0)  # clip's voice encoder holds at most 30 s (a dense mask)
_RANDOM = 0xFFFFFFFF  # clip's "random seed"
_CTX = 1024  # voice (<= 29 s at 12.5 Hz) + one chunk of text + its frame budget


class MtmdSynthesizer(Synthesizer):
    """A llama.cpp TTS model (backbone + mmproj) speaking through mtmd's generation helper."""

    name = "llama.cpp"

    def __init__(self, model: str | Path, mmproj: str | Path, *, threads: int = 0) -> None:
        import llama_cpp
        from llama_cpp import mtmd_cpp as mtmd

        from llamactl.engine.context import ContextLayout, open_context
        from llamactl.engine.limits import physical_cores
        from llamactl.engine.model import Model
        from llamactl.engine.projector import last_errors, open_mtmd

        self._llama, self._mtmd = llama_cpp, mtmd
        self.model_path, self.mmproj_path = Path(model), Path(mmproj)
        if not self.model_path.is_file():
            raise ModelNotFoundError(f"TTS model file not found: {self.model_path}")
        _check_projector(self.mmproj_path)
        threads = threads or physical_cores()
        self._lock = threading.Lock()
        self._ctx: mtmd.mtmd_context_p | None = None
        self._lctx: llama_cpp.llama_context_p | None = None
        self._gen: mtmd.mtmd_helper_gen_audio_p | None = None
        self._backbone = Model(self.model_path)
        try:
            ctx = open_mtmd(self.mmproj_path, self._backbone.handle, n_threads=threads)
            if ctx is None:
                raise CannotSpeakError(
                    f"llama.cpp could not load {self.mmproj_path.name} for "
                    f"{self.model_path.name}: {last_errors()}"
                )
            self._ctx = ctx
            info = mtmd.mtmd_gen_audio_get_info(ctx)
            self.generator = GENERATORS.get(int(info.type), "")
            if not self.generator:
                raise CannotSpeakError(
                    f"{self.model_path.name} cannot speak: llama.cpp found no audio generator "
                    f"in {self.mmproj_path.name} (mtmd_gen_audio_get_info: none); it is an "
                    "input projector (vision or hearing), not a TTS model"
                )
            if self.generator not in DRIVEN:
                raise CannotSpeakError(
                    f"{self.model_path.name} is a {self.generator} model ({info.sample_rate} "
                    "Hz): its frames start from a codebook token sampled from the backbone, "
                    "a loop llamactl does not drive yet (pocket-tts models speak); use the "
                    "eSpeak NG voice instead"
                )
            self._rate = int(info.sample_rate)
            self.variant = (
                info.model_variant.decode("utf-8", "replace") if info.model_variant else ""
            )
            self.can_clone = bool(mtmd.mtmd_support_audio(ctx))
            layout = ContextLayout(
                n_ctx=_CTX,
                n_batch=512,
                n_ubatch=512,
                n_seq_max=1,
                n_threads=threads,
                n_threads_batch=threads,
                embeddings=True,  # the generator reads the backbone's hidden states
            )
            self._lctx = open_context(self._backbone, layout)
            self._n_embd = llama_cpp.llama_model_n_embd(self._backbone.handle)
            gen = mtmd.mtmd_helper_gen_audio_init(self._lctx, ctx)
            if not gen:
                raise CannotSpeakError(
                    f"llama.cpp has no generation loop for {self.model_path.name}'s "
                    f"{self.generator} generator"
                )
            self._gen = gen
        except BaseException:
            self.close()
            raise

    @property
    def sample_rate(self) -> int:
        return self._rate

    def voices(self) -> list[Voice]:
        about = f"{self.generator} ({self.model_path.name}): the model's own voice"
        if self.can_clone:
            about += "; clone another from a reference recording (speaker_ref)"
        return [Voice("default", about)]

    def synthesize(
        self,
        text: str,
        *,
        voice: str | None = None,
        speed: float = 1.0,
        speaker_ref: bytes | None = None,
        seed: int | None = None,
    ) -> Iterator[np.ndarray]:
        # `voice` names all speak with the model's voice (clients send OpenAI's by default);
        # another voice is a reference recording
        if check_speed(speed) != 1.0:
            raise InvalidRequestError(
                f"Field 'speed': {self.model_path.name} speaks at its own pace (1.0); got {speed}"
            )
        text = check_text(text)
        if not text.strip():
            raise InvalidRequestError("Field 'input': nothing to say")
        if speaker_ref and not self.can_clone:
            raise UnsupportedVoiceFeature(
                f"{self.mmproj_path.name} has no voice encoder: it cannot clone a voice"
            )
        return self._stream(text, speaker_ref, _RANDOM if seed is None else seed % _RANDOM)

    def _stream(self, text: str, speaker_ref: bytes | None, seed: int) -> Iterator[np.ndarray]:
        """Generator: waits for its turn at the first `next()`; closing it stops generation
        within one frame."""
        ctypes, llama, mtmd = _ctypes, self._llama, self._mtmd
        with self._lock:
            if self._gen is None or self._lctx is None or self._ctx is None:
                raise CannotSpeakError(f"{self.model_path.name}: the synthesizer is closed")
            bitmap = self._reference(speaker_ref) if speaker_ref else None
            try:
                encoded = text.encode("utf-8")
                inp = mtmd.mtmd_helper_gen_audio_inp()
                inp.seq_id = 0
                inp.prompt = encoded
                inp.prompt_len = len(encoded)
                inp.speaker_ref = bitmap
                inp.lang = None
                inp.top_k = 50
                inp.top_p = 1.0
                inp.seed = seed
                inp.out_type = mtmd.MTMD_HELPER_GEN_AUDIO_OUTTYPE_PCM
                llama.llama_memory_clear(llama.llama_get_memory(self._lctx), True)
                self._reseed(seed)
                if mtmd.mtmd_helper_gen_audio_set_input(self._gen, ctypes.byref(inp)) != 0:
                    raise InvalidRequestError(
                        f"{self.model_path.name} cannot say this text (llama.cpp refused the "
                        "prompt: empty after normalization, or it does not tokenize)"
                    )
                while (left := mtmd.mtmd_helper_gen_audio_step_prompt(self._gen, 512)) > 0:
                    pass
                if left < 0:
                    raise CannotSpeakError(f"{self.model_path.name}: the prompt did not decode")
                hidden = llama.llama_get_embeddings_ith(self._lctx, -1)
                stop = ctypes.c_bool(False)
                nxt = ctypes.POINTER(ctypes.c_float)()
                sent = 0
                while not stop.value:
                    rc = mtmd.mtmd_helper_gen_audio_step_gen(
                        self._gen, -1, hidden, ctypes.byref(nxt), ctypes.byref(stop)
                    )
                    if rc != 0:
                        raise CannotSpeakError(f"{self.model_path.name}: a frame did not decode")
                    pcm = self._output()  # a view: valid until the next step
                    if pcm.size > sent:
                        fresh = pcm[sent:].copy()
                        sent = pcm.size
                        yield fresh
                    if not nxt:
                        break
                    hidden = nxt
            finally:
                if bitmap is not None:
                    mtmd.mtmd_bitmap_free(bitmap)
                mtmd.mtmd_helper_gen_audio_reset(self._gen)

    def _reseed(self, seed: int) -> None:
        """clip keeps drawing from its generator while the seed it is handed stays the same:
        handing it another one first makes this request's seed start it afresh."""
        mtmd, ctypes = self._mtmd, _ctypes
        assert self._ctx is not None
        inp = mtmd.mtmd_gen_inp_default(self._ctx)
        inp.type = mtmd.MTMD_GEN_PROCESS_TYPE_GEN_CODE
        zeros = (ctypes.c_float * self._n_embd)()
        inp.embd = ctypes.cast(zeros, ctypes.POINTER(ctypes.c_float))
        inp.seed = 0 if seed != 0 else 1
        out = mtmd.mtmd_gen_out()
        if mtmd.mtmd_gen_audio_process(self._ctx, ctypes.byref(inp), ctypes.byref(out)) != 0:
            raise CannotSpeakError(f"{self.model_path.name}: the generator did not run")

    def _reference(self, speaker_ref: bytes):  # -> mtmd_bitmap_p
        """The reference recording as mtmd's audio bitmap (decoded and resampled by
        llama.cpp), within the voice encoder's length."""
        mtmd, ctypes = self._mtmd, _ctypes
        buf = (ctypes.c_uint8 * len(speaker_ref)).from_buffer_copy(speaker_ref)
        bitmap = mtmd.mtmd_helper_bitmap_init_from_buf(self._ctx, buf, len(speaker_ref), False)
        if not bitmap:
            raise InvalidRequestError(
                "Field 'speaker_ref': not an audio file llama.cpp can decode (WAV, MP3 or FLAC)"
            )
        seconds = mtmd.mtmd_bitmap_get_nx(bitmap) / self._rate
        low, high = REFERENCE_SECONDS
        if not low <= seconds <= high:
            mtmd.mtmd_bitmap_free(bitmap)
            raise InvalidRequestError(
                f"Field 'speaker_ref': {seconds:.1f} s of audio; a voice reference is "
                f"{low:g} to {high:g} s long"
            )
        return bitmap

    def _output(self) -> np.ndarray:
        """Every sample generated so far (the helper decodes the frames it holds), as a view
        of the helper's buffer, which the next step may move."""
        mtmd, ctypes = self._mtmd, _ctypes
        rate = ctypes.c_int32()
        data = ctypes.POINTER(ctypes.c_char)()
        size = ctypes.c_size_t()
        n = ctypes.c_int64()
        if (
            mtmd.mtmd_helper_gen_audio_get_output(
                self._gen,
                ctypes.byref(rate),
                ctypes.byref(data),
                ctypes.byref(size),
                ctypes.byref(n),
            )
            != 0
        ):
            raise CannotSpeakError(f"{self.model_path.name}: the audio did not decode")
        count = size.value // 4
        if not count:
            return np.zeros(0, np.float32)
        floats = ctypes.cast(data, ctypes.POINTER(ctypes.c_float))
        return np.ctypeslib.as_array(floats, shape=(count,))

    def close(self) -> None:
        mtmd = self._mtmd
        with self._lock:
            if getattr(self, "_gen", None):
                mtmd.mtmd_helper_gen_audio_free(self._gen)
                self._gen = None
            if self._lctx is not None:
                self._llama.llama_free(self._lctx)
                self._lctx = None
            if getattr(self, "_ctx", None):
                mtmd.mtmd_free(self._ctx)
                self._ctx = None
            if getattr(self, "_backbone", None) is not None:
                self._backbone.close()


def open_mtmd_synthesizer(
    model: str | Path, mmproj: str | Path | None = None, *, threads: int = 0
) -> Synthesizer:
    """The synthesizer for a llama.cpp TTS model, or a CannotSpeakError saying why not."""
    model = Path(model)
    if not model.is_file():
        raise ModelNotFoundError(f"TTS model file not found: {model}")
    if mmproj is None:
        raise CannotSpeakError(
            f"{model.name} cannot speak: a llama.cpp TTS model needs the mmproj that holds "
            "its audio generator (--mmproj); without one llamactl speaks with eSpeak NG"
        )
    return MtmdSynthesizer(model, mmproj, threads=threads)
