"""Images (and audio) in decision prompts, through llama.cpp's `mtmd` and the model's mmproj.

The rendered prompt holds one media marker per image; `mtmd_tokenize` splits it into text and
media chunks. Each distinct image of a request is encoded once (`encode`), and its embeddings
are decoded into whichever sequence needs them (`decode`), so questions that share the image
(in a shared prefix or not) never run the vision tower twice.
"""

from __future__ import annotations

import ctypes
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import llama_cpp
import numpy as np
from llama_cpp import mtmd_cpp as mtmd

from llamactl.core.errors import InvalidRequestError, LlamactlError, ModelLoadError
from llamactl.core.gguf_info import read_gguf_info
from llamactl.engine._backend import model_of, require

from .types import Media

log = logging.getLogger("llamactl.mtmd")
_GGML_ERROR = 4  # ggml.h: 0 none, 1 debug, 2 info, 3 warn, 4 error, 5 continuation


@llama_cpp.llama_log_callback
def _mtmd_log(level: int, text: bytes, _user: ctypes.c_void_p) -> None:
    """mtmd narrates every chunk it tokenizes; keep only its errors (all with
    LLAMACTL_LLAMA_LOG=1)."""
    if level == _GGML_ERROR or os.environ.get("LLAMACTL_LLAMA_LOG") == "1":
        log.warning("%s", text.decode("utf-8", "replace").rstrip())


_log_routed = False


def _route_log() -> None:
    global _log_routed
    if not _log_routed:
        mtmd.mtmd_log_set(_mtmd_log, None)
        mtmd.mtmd_helper_log_set(_mtmd_log, None)
        _log_routed = True


# Projector types of decision towers the pinned llama.cpp's mtmd does not know (it answers
# "unknown projector type"): d1-omni's SigLIP-style vision tower and its conformer audio tower.
UNSUPPORTED_PROJECTORS = {
    "d1omni_v": "d1-omni's vision tower",
    "d1omni_a": "d1-omni's audio tower",
}


def projector_types(info) -> list[str]:
    """Every projector type an mmproj header names (one file may hold vision and audio)."""
    keys = ("clip.projector_type", "clip.vision.projector_type", "clip.audio.projector_type")
    found = [info.get(k) for k in keys]
    return list(dict.fromkeys(str(t).lower() for t in found if t))


# mtmd_helper_decode_image_chunk's optional post-decode hook, passed as a NULL function pointer
_NO_CALLBACK = mtmd.mtmd_helper_post_decode_callback()


@dataclass(eq=True, frozen=True)
class MediaUnit:
    """One image chunk of a prompt; equal when it is the same image of the same request."""

    key: int  # the media's index in the request
    n_tokens: int = field(compare=False)
    n_pos: int = field(compare=False)
    chunk: mtmd.mtmd_input_chunk_p = field(compare=False, repr=False)  # owned by a chunk list


class Projector:
    """An mmproj paired with the text model."""

    def __init__(self, path: Path, model_handle: llama_cpp.llama_model_p, n_threads: int) -> None:
        _route_log()
        info = read_gguf_info(path)  # a wrong file is refused with a message, not an abort
        if info.model_type != "mmproj" and info.architecture != "clip":
            raise ModelLoadError(f"{path.name} is not an mmproj file")
        types = projector_types(info)
        unknown = [t for t in types if t in UNSUPPORTED_PROJECTORS]
        if unknown:
            towers = " and ".join(UNSUPPORTED_PROJECTORS[t] for t in unknown)
            raise ModelLoadError(
                f"{path.name} holds {towers} (projector type {', '.join(unknown)}), which the "
                "llama.cpp that llama-cpp-python 0.3.36 builds cannot run; remove or rename "
                "the mmproj to serve the model on text alone"
            )
        params = mtmd.mtmd_context_params_default()
        params.use_gpu = False
        params.n_threads = n_threads
        params.print_timings = False
        params.warmup = False
        ctx = mtmd.mtmd_init_from_file(str(path).encode(), model_handle, params)
        if not ctx:
            named = f" (projector type {', '.join(types)})" if types else ""
            raise ModelLoadError(
                f"mtmd could not load the mmproj {path}{named}: the pinned llama.cpp does not "
                "know its projector, or the file does not belong to this model (see the error "
                "logged above)"
            )
        self.path = path
        self._ctx: mtmd.mtmd_context_p | None = ctx
        self.marker = mtmd.mtmd_default_marker().decode()
        self.vision = bool(mtmd.mtmd_support_vision(ctx))
        self.audio = bool(mtmd.mtmd_support_audio(ctx))

    @property
    def ctx(self) -> mtmd.mtmd_context_p:
        if self._ctx is None:
            raise LlamactlError(f"the mmproj {self.path.name} is closed")
        return self._ctx

    def close(self) -> None:
        if self._ctx:
            mtmd.mtmd_free(self._ctx)
            self._ctx = None

    def supports(self, kind: str) -> bool:
        return self.vision if kind == "image" else self.audio

    def open(self, media: tuple[Media, ...]) -> MediaSet:
        return MediaSet(self, media)


class MediaSet:
    """One request's media: bitmaps, the chunks of every tokenized prompt, encoded images."""

    def __init__(self, projector: Projector, media: tuple[Media, ...]) -> None:
        self.projector = projector
        self._bitmaps: list[mtmd.mtmd_bitmap_p] = []
        self._chunk_lists: list[mtmd.mtmd_input_chunks_p] = []
        self._encoded: dict[int, np.ndarray] = {}
        try:
            for i, m in enumerate(media):
                buf = (ctypes.c_uint8 * len(m.data)).from_buffer_copy(m.data)
                bitmap = mtmd.mtmd_helper_bitmap_init_from_buf(
                    projector.ctx, buf, len(m.data), False
                )
                if not bitmap:
                    raise InvalidRequestError(f"media {i} ({m.mime}) could not be decoded")
                mtmd.mtmd_bitmap_set_id(bitmap, str(i).encode())
                self._bitmaps.append(bitmap)
        except BaseException:
            self.close()
            raise

    def tokenize(self, text: str) -> list[int | MediaUnit]:
        """Text with one marker per media, in order, to token ids and media units."""
        chunks = require(mtmd.mtmd_input_chunks_init(), "mtmd_input_chunks_init")
        self._chunk_lists.append(chunks)
        data = text.encode("utf-8")
        inp = mtmd.mtmd_input_text(data, len(data), False, True)
        bitmaps = (mtmd.mtmd_bitmap_p_ctypes * len(self._bitmaps))(*self._bitmaps)
        rc = mtmd.mtmd_tokenize(
            self.projector.ctx, chunks, ctypes.byref(inp), bitmaps, len(self._bitmaps)
        )
        if rc != 0:
            raise InvalidRequestError(
                f"the prompt and its {len(self._bitmaps)} media do not match (mtmd error {rc})"
            )
        units: list[int | MediaUnit] = []
        for i in range(mtmd.mtmd_input_chunks_size(chunks)):
            chunk = require(mtmd.mtmd_input_chunks_get(chunks, i), "mtmd_input_chunks_get")
            kind = mtmd.mtmd_input_chunk_get_type(chunk)
            if kind == mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT:
                n = ctypes.c_size_t()
                ptr = mtmd.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
                units.extend(ptr[k] for k in range(n.value))
            else:
                key = int((mtmd.mtmd_input_chunk_get_id(chunk) or b"0").decode())
                units.append(
                    MediaUnit(
                        key,
                        mtmd.mtmd_input_chunk_get_n_tokens(chunk),
                        mtmd.mtmd_input_chunk_get_n_pos(chunk),
                        chunk,
                    )
                )
        return units

    def decode(
        self,
        unit: MediaUnit,
        lctx: llama_cpp.llama_context_p,
        n_past: int,
        seq_id: int,
        n_batch: int,
    ) -> int:
        """Decode the media into `seq_id` at `n_past` (encoding it the first time); returns
        the position after it."""
        embd = self._encoded.get(unit.key)
        ctx = self.projector.ctx
        if embd is None:
            if mtmd.mtmd_encode_chunk(ctx, unit.chunk) != 0:
                raise LlamactlError(f"mtmd could not encode media {unit.key}")
            n_embd = llama_cpp.llama_model_n_embd_inp(model_of(lctx))
            out = mtmd.mtmd_get_output_embd(ctx)
            embd = np.ctypeslib.as_array(out, shape=(unit.n_tokens * n_embd,)).copy()
            self._encoded[unit.key] = embd
        new_past = llama_cpp.llama_pos(0)
        rc = mtmd.mtmd_helper_decode_image_chunk(
            ctx,
            lctx,
            unit.chunk,
            embd.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
            n_past,
            seq_id,
            n_batch,
            ctypes.byref(new_past),
            _NO_CALLBACK,
            None,
        )
        if rc != 0:
            raise LlamactlError(f"llama.cpp could not decode media {unit.key} (code {rc})")
        return new_past.value

    def close(self) -> None:
        for chunks in self._chunk_lists:
            mtmd.mtmd_input_chunks_free(chunks)
        self._chunk_lists.clear()
        for bitmap in self._bitmaps:
            mtmd.mtmd_bitmap_free(bitmap)
        self._bitmaps.clear()
        self._encoded.clear()
