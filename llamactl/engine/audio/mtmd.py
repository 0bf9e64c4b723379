"""llama.cpp audio models through `mtmd`: a text GGUF plus an mmproj with an audio encoder.

The loading path is llama.cpp's own: the mmproj is checked with our GGUF header reader (so a
wrong file is refused with a message, not a native abort), `mtmd_init_from_file` pairs it
with the text model, audio reaches the encoder as an `mtmd_bitmap_init_from_audio` bitmap at
the encoder's native rate, and the model reads it inside its own chat template with an ASR
prompt (a system text, a user text, then the media marker), then decodes greedily.

The pinned llama-cpp-python (0.3.36) binds all of `mtmd.h`, but its llama.cpp has no
streaming audio input (`mtmd_audio_stream_*`): each window is encoded whole, and the
streaming rules live in `TranscriptionStream`, as for every backend.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from llamactl.core.errors import ModelLoadError, ModelNotFoundError

from .transcriber import Transcriber
from .types import WindowText

if TYPE_CHECKING:  # loaded on first use: importing llama_cpp loads the shared library
    import llama_cpp
    from llama_cpp import mtmd_cpp

ASR_SYSTEM = "You are a speech recognizer. Write down exactly what is said, nothing else."
ASR_USER = "Transcribe this audio."
MAX_TOKENS = 256


def asr_messages(marker: str, *, language: str | None = None, prompt: str | None = None):
    """The chat messages that ask the model for a transcript of the audio at `marker`."""
    user = ASR_USER
    if language:
        user = f"Transcribe this audio (language: {language})."
    if prompt:
        user += f" Context: {prompt.strip()}"
    return [
        {"role": "system", "content": ASR_SYSTEM},
        {"role": "user", "content": f"{user}\n{marker}"},
    ]


def check_mmproj(path: Path) -> str:
    """The projector type of an mmproj that has an audio encoder, or a clear error."""
    from llamactl.core.gguf_info import read_gguf_info

    if not path.is_file():
        raise ModelNotFoundError(f"mmproj file not found: {path}")
    info = read_gguf_info(path)  # raises ModelLoadError naming the file when not GGUF
    if info.model_type != "mmproj" and info.architecture != "clip":
        raise ModelLoadError(
            f"{path.name} is a {info.model_type} file ({info.architecture}), not an mmproj "
            "projector; pass the mmproj that belongs to the model"
        )
    if "hear" not in info.capabilities:
        what = "a vision-only projector" if "see" in info.capabilities else "no encoder"
        raise ModelLoadError(
            f"{path.name} has no audio encoder ({what}); speech needs an audio mmproj"
        )
    kind = info.get("clip.audio.projector_type") or info.get("clip.projector_type") or "unknown"
    return str(kind)


class MtmdTranscriber(Transcriber):
    def __init__(
        self,
        model_path: str | Path,
        mmproj_path: str | Path,
        *,
        threads: int = 0,
        n_ctx: int = 4096,
    ) -> None:
        import llama_cpp
        from llama_cpp import mtmd_cpp as mtmd

        from llamactl.engine.chat.template import CHATML_TEMPLATE, ChatTemplate
        from llamactl.engine.limits import physical_cores
        from llamactl.engine.model import Model
        from llamactl.engine.projector import last_errors, open_mtmd

        model_path, mmproj_path = Path(model_path), Path(mmproj_path)
        if not model_path.is_file():
            raise ModelNotFoundError(f"speech model file not found: {model_path}")
        self.projector = check_mmproj(mmproj_path)
        self.threads = threads or physical_cores()
        self._mtmd = mtmd
        self._llama = llama_cpp
        self._ctx: mtmd.mtmd_context_p | None = None
        self._lctx: llama_cpp.llama_context_p | None = None
        self._sampler: llama_cpp.llama_sampler_p | None = None
        self._model = Model(model_path)
        try:
            ctx = open_mtmd(mmproj_path, self._model.handle, n_threads=self.threads)
            if ctx is None:
                raise ModelLoadError(
                    f"llama.cpp could not load {mmproj_path.name} for {model_path.name}: "
                    f"{last_errors()} "
                    "(the projector does not fit this text model, or this llama.cpp does not "
                    f"know its type '{self.projector}')"
                )
            self._ctx = ctx
            if not mtmd.mtmd_support_audio(ctx):
                raise ModelLoadError(f"{mmproj_path.name} loaded without audio support")
            self.sample_rate = int(mtmd.mtmd_get_audio_sample_rate(ctx))
            marker = mtmd.mtmd_get_marker(ctx) or b"<__media__>"
            self._marker = marker.decode("utf-8")
            cparams = llama_cpp.llama_context_default_params()
            cparams.n_ctx = n_ctx
            cparams.n_batch = 512
            cparams.n_ubatch = 512
            cparams.n_threads = self.threads
            cparams.n_threads_batch = self.threads
            cparams.no_perf = True
            self._lctx = llama_cpp.llama_init_from_model(self._model.handle, cparams)
            if not self._lctx:
                raise ModelLoadError(f"llama.cpp could not create a context for {model_path}")
            chain = llama_cpp.llama_sampler_chain_init(
                llama_cpp.llama_sampler_chain_default_params()
            )
            llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_greedy())
            self._sampler = chain
        except BaseException:
            self.close()
            raise
        info = self._model.info
        self._template = ChatTemplate(
            info.chat_template or CHATML_TEMPLATE,
            bos_token=info.bos_token,
            eos_token=info.eos_token,
        )
        self.name = model_path.stem
        self.english_only = False

    def prompt_text(self, *, language: str | None = None, prompt: str | None = None) -> str:
        messages = asr_messages(self._marker, language=language, prompt=prompt)
        return self._template.render(messages, add_generation_prompt=True)

    def transcribe_window(
        self, audio: np.ndarray, *, language: str | None = None, prompt: str | None = None
    ) -> WindowText:
        from llamactl.engine._backend import memory_of

        mtmd = self._mtmd
        llama = self._llama
        ctx, lctx, _ = self._handles()
        samples = np.ascontiguousarray(audio, dtype=np.float32)
        if samples.size < self.sample_rate // 10:
            return WindowText("", no_speech_prob=1.0)
        text_bytes = self.prompt_text(language=language, prompt=prompt).encode("utf-8")
        data = samples.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        bitmap = mtmd.mtmd_bitmap_init_from_audio(samples.size, data)
        chunks = mtmd.mtmd_input_chunks_init()
        try:
            if not bitmap or not chunks:
                raise RuntimeError("mtmd could not allocate the audio input")
            inp = mtmd.mtmd_input_text(text_bytes, len(text_bytes), True, True)
            bitmaps = (mtmd.mtmd_bitmap_p_ctypes * 1)(bitmap)
            rc = mtmd.mtmd_tokenize(ctx, chunks, ctypes.byref(inp), bitmaps, 1)
            if rc != 0:
                raise RuntimeError(f"mtmd_tokenize failed ({rc}): the prompt lost its marker?")
            llama.llama_memory_clear(memory_of(lctx), True)
            n_past = llama.llama_pos(0)
            rc = mtmd.mtmd_helper_eval_chunks(
                ctx, lctx, chunks, 0, 0, 512, True, ctypes.byref(n_past)
            )
            if rc != 0:
                raise RuntimeError(f"mtmd could not evaluate the audio ({rc})")
            tokens = self._generate()
        finally:
            if chunks:
                mtmd.mtmd_input_chunks_free(chunks)
            if bitmap:
                mtmd.mtmd_bitmap_free(bitmap)
        text = self._model.detokenize(tokens).strip()
        return WindowText(text, tokens=len(tokens))

    def _handles(
        self,
    ) -> tuple[mtmd_cpp.mtmd_context_p, llama_cpp.llama_context_p, llama_cpp.llama_sampler_p]:
        if self._ctx is None or self._lctx is None or self._sampler is None:
            raise ModelLoadError("the speech model is closed")
        return self._ctx, self._lctx, self._sampler

    def _generate(self) -> list[int]:
        """Greedy tokens up to the end of the transcript, MAX_TOKENS, or a loop: a transcript
        that repeats itself (what a model does on audio it cannot read) stops there rather
        than filling the window with the same words."""
        from llamactl.core.repetition import RepetitionGuard

        llama = self._llama
        _, lctx, sampler = self._handles()
        llama.llama_sampler_reset(sampler)
        guard = RepetitionGuard.for_speech()
        out: list[int] = []
        token_buf = (llama.llama_token * 1)()
        for _ in range(MAX_TOKENS):
            token = llama.llama_sampler_sample(sampler, lctx, -1)
            if self._model.is_eog(token):
                break
            out.append(token)
            if guard.feed(self._model.token_bytes(token).decode("utf-8", "replace")):
                break
            token_buf[0] = token
            if llama.llama_decode(lctx, llama.llama_batch_get_one(token_buf, 1)) != 0:
                break
        return out

    def close(self) -> None:
        # each is absent when __init__ failed before it; the bindings are set before them all
        sampler, lctx, ctx = (getattr(self, a, None) for a in ("_sampler", "_lctx", "_ctx"))
        if sampler:
            self._llama.llama_sampler_free(sampler)
            self._sampler = None
        if lctx:
            self._llama.llama_free(lctx)
            self._lctx = None
        if ctx:
            self._mtmd.mtmd_free(ctx)
            self._ctx = None
        model = getattr(self, "_model", None)
        if model is not None:
            model.close()
