"""Images (and audio) in decision prompts, through llama.cpp's `mtmd` and the model's mmproj
(opened in `engine/projector.py`).

The rendered prompt holds one media marker per image; `mtmd_tokenize` splits it into text and
media chunks. Each distinct image of a request is encoded once (`encode`), and its embeddings
are decoded into whichever sequence needs them (`decode`), so questions that share the image
(in a shared prefix or not) never run the vision tower twice.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field

import llama_cpp
import numpy as np
from llama_cpp import mtmd_cpp as mtmd

from llamactl.core.errors import InvalidRequestError, LlamactlError
from llamactl.engine._backend import model_of, require

from ..projector import Projector
from .types import Media

__all__ = ["MediaSet", "MediaUnit"]

# mtmd_helper_decode_image_chunk's optional post-decode hook, passed as a NULL function pointer
_NO_CALLBACK = mtmd.mtmd_helper_post_decode_callback()


@dataclass(eq=True, frozen=True)
class MediaUnit:
    """One image chunk of a prompt; equal when it is the same image of the same request."""

    key: int  # the media's index in the request
    n_tokens: int = field(compare=False)
    n_pos: int = field(compare=False)
    chunk: mtmd.mtmd_input_chunk_p = field(compare=False, repr=False)  # owned by a chunk list


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
