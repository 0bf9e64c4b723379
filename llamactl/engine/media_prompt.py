"""Chat prompts with images or audio: text tokens and mtmd media chunks, in one token list.

`mtmd_tokenize` splits a rendered prompt at its media markers into text chunks and media
chunks. The engine keeps one list of "tokens" per slot (what its KV holds), so each media
chunk stands there as a run of placeholder ids, one per KV position it fills: negative numbers
drawn from a hash of the media's bytes (llama-server keys its chunks by a hash of the same
kind). KV reuse and the prompt cache then compare prompts as before: a cached prefix that
holds another image never matches, the same image matches whole, and a text token never equals
a placeholder. The engine decodes a media span with `MediaPrompt.decode` (the vision or audio
encoder, then its embeddings into the slot's sequence) and never cuts one (`floor`).
"""

from __future__ import annotations

import ctypes
import hashlib
import threading
import weakref
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import llama_cpp
from llama_cpp import mtmd_cpp as mtmd

from llamactl.core.errors import InvalidRequestError, LlamactlError, ModelLoadError

from ._backend import require
from .projector import Projector

__all__ = [
    "MediaInput",
    "MediaPrompt",
    "MediaSpan",
    "UNSUPPORTED_MEDIA_MESSAGES",
    "open_chat_projector",
    "tokenize_media",
]

MediaKind = Literal["image", "audio"]

# llama-server's words when a request carries media the model cannot read
UNSUPPORTED_MEDIA_MESSAGES: dict[str, str] = {
    kind: f"{kind} input is not supported - hint: if this is unexpected, you may need to "
    "provide the mmproj"
    for kind in ("image", "audio")
}
_PLACEHOLDER_RANGE = 2**31 - 1  # placeholders are -1 .. -(2**31 - 1): int32, never a token id


@dataclass(frozen=True)
class MediaInput:
    """One image or audio clip of a request: the file's bytes (PNG, JPEG..., WAV, MP3...)."""

    data: bytes
    kind: MediaKind = "image"


@dataclass(frozen=True)
class MediaSpan:
    """One media chunk of a prompt: `n_tokens` KV positions from `start`."""

    start: int
    n_tokens: int
    kind: MediaKind
    chunk: mtmd.mtmd_input_chunk_p  # owned by the prompt's chunk list

    @property
    def end(self) -> int:
        return self.start + self.n_tokens


def open_chat_projector(path: Path, model_handle: llama_cpp.llama_model_p, n_threads: int):
    """The mmproj at `path` paired with a chat model; refused when this engine cannot place
    its embeddings (M-RoPE projectors: Qwen2-VL and its successors)."""
    if not path.is_file():
        raise ModelLoadError(f"mmproj file not found: {path}")
    projector = Projector(path, model_handle, n_threads)
    if mtmd.mtmd_decode_use_mrope(projector.ctx):
        projector.close()
        raise ModelLoadError(
            f"{path.name} places its media with M-RoPE (2-D positions, the Qwen2-VL family), "
            "which llamactl's chat engine does not support yet"
        )
    if not (projector.vision or projector.audio):
        projector.close()
        raise ModelLoadError(f"{path.name} has neither a vision nor an audio encoder")
    return projector


class MediaPrompt:
    """A tokenized prompt with media: `tokens` (placeholders where media go) and `spans`.

    Holds mtmd's chunk list (freed when the prompt is collected or `close`d) and the projector
    that encodes it.
    """

    def __init__(
        self,
        projector: Projector,
        chunks: mtmd.mtmd_input_chunks_p,
        tokens: list[int],
        spans: tuple[MediaSpan, ...],
    ) -> None:
        self.projector = projector
        self.tokens = tokens
        self.spans = spans
        self._starts = [s.start for s in spans]
        self._free = weakref.finalize(self, mtmd.mtmd_input_chunks_free, chunks)

    def close(self) -> None:
        self._free()

    @property
    def n_media(self) -> int:
        return len(self.spans)

    def span_at(self, pos: int) -> MediaSpan | None:
        """The span that starts at `pos`, if one does."""
        i = bisect_right(self._starts, pos) - 1
        return self.spans[i] if i >= 0 and self.spans[i].start == pos else None

    def next_start(self, pos: int) -> int | None:
        """Where the first span at or after `pos` starts (None: only text is left)."""
        i = bisect_right(self._starts, pos - 1)
        return self._starts[i] if i < len(self._starts) else None

    def floor(self, n: int) -> int:
        """The longest prefix of at most `n` positions that cuts no span."""
        i = bisect_right(self._starts, n - 1) - 1
        if i >= 0 and self.spans[i].start < n < self.spans[i].end:
            return self.spans[i].start
        return n

    def text_tokens(self) -> list[int]:
        """The prompt's text tokens (every position outside the spans)."""
        out: list[int] = []
        pos = 0
        for span in self.spans:
            out.extend(self.tokens[pos : span.start])
            pos = span.end
        out.extend(self.tokens[pos:])
        return out

    def decode(
        self, span: MediaSpan, lctx: llama_cpp.llama_context_p, seq_id: int, n_batch: int
    ) -> None:
        """Encode the span's media and decode its embeddings into `seq_id` at its positions
        (no logits: the prompt goes on with text)."""
        new_past = llama_cpp.llama_pos(0)
        rc = mtmd.mtmd_helper_eval_chunk_single(
            self.projector.ctx,
            lctx,
            span.chunk,
            span.start,
            seq_id,
            n_batch,
            False,
            ctypes.byref(new_past),
        )
        if rc != 0:
            raise LlamactlError(f"llama.cpp could not evaluate the {span.kind} (code {rc})")
        if new_past.value != span.end:  # M-RoPE projectors are refused at load
            raise LlamactlError(
                f"the {span.kind} filled {new_past.value - span.start} positions, "
                f"not {span.n_tokens}"
            )


def media_key(data: bytes) -> bytes:
    """The identity of a media file: a hash of its bytes."""
    return hashlib.blake2b(data, digest_size=16).digest()


def placeholders(key: bytes, part: int, n: int) -> list[int]:
    """`n` negative ids standing for the `part`-th chunk of the media keyed `key`."""
    out = []
    for k in range(n):
        h = hashlib.blake2b(key + part.to_bytes(4, "little") + k.to_bytes(4, "little"))
        out.append(-1 - int.from_bytes(h.digest()[:8], "little") % _PLACEHOLDER_RANGE)
    return out


def tokenize_media(
    projector: Projector,
    text: str,
    media: tuple[MediaInput, ...],
    *,
    add_special: bool,
) -> MediaPrompt:
    """`text`, holding one media marker per item of `media` in order, as a MediaPrompt.

    Bad input is an InvalidRequestError: media the projector cannot read, a file mtmd cannot
    decode, markers and media that do not pair up.
    """
    markers = text.count(projector.marker)
    if markers != len(media):
        raise InvalidRequestError(
            f"the prompt's media markers ({markers}) do not match its {len(media)} media"
        )
    with _DECODING:  # one request's decoded media in memory at a time
        return _tokenize_media(projector, text, media, add_special)


# Decoded images are 3 bytes a pixel and are held until mtmd has cut them into chunks: requests
# decode one after another, so the peak is one request's media (bounded by the server's
# --max-media-pixels), not that times the preparation workers.
_DECODING = threading.Lock()


def _tokenize_media(
    projector: Projector, text: str, media: tuple[MediaInput, ...], add_special: bool
) -> MediaPrompt:
    bitmaps: list[mtmd.mtmd_bitmap_p] = []
    keys: list[bytes] = []
    chunks = require(mtmd.mtmd_input_chunks_init(), "mtmd_input_chunks_init")
    try:
        for i, m in enumerate(media):
            if not projector.supports(m.kind):
                raise InvalidRequestError(UNSUPPORTED_MEDIA_MESSAGES[m.kind])
            if not m.data:
                raise InvalidRequestError(f"media {i} ({m.kind}) is empty")
            buf = (ctypes.c_uint8 * len(m.data)).from_buffer_copy(m.data)
            bitmap = mtmd.mtmd_helper_bitmap_init_from_buf(projector.ctx, buf, len(m.data), False)
            if not bitmap:
                raise InvalidRequestError(
                    f"Failed to load image or audio file: media {i} ({m.kind}) could not be decoded"
                )
            bitmaps.append(bitmap)
            is_audio = bool(mtmd.mtmd_bitmap_is_audio(bitmap))
            if is_audio != (m.kind == "audio"):
                what = "audio" if is_audio else "an image"
                raise InvalidRequestError(f"media {i} was sent as {m.kind} but holds {what}")
            if not projector.supports("audio" if is_audio else "image"):
                raise InvalidRequestError(
                    UNSUPPORTED_MEDIA_MESSAGES["audio" if is_audio else "image"]
                )
            key = media_key(m.data)
            keys.append(key)
            mtmd.mtmd_bitmap_set_id(bitmap, str(i).encode())
        data = text.encode("utf-8")
        inp = mtmd.mtmd_input_text(data, len(data), add_special, True)
        array = (mtmd.mtmd_bitmap_p_ctypes * len(bitmaps))(*bitmaps)
        rc = mtmd.mtmd_tokenize(projector.ctx, chunks, ctypes.byref(inp), array, len(bitmaps))
        if rc != 0:
            raise InvalidRequestError(f"mtmd could not preprocess the media (error {rc})")
        tokens, spans = _flatten(chunks, keys)
    except BaseException:
        mtmd.mtmd_input_chunks_free(chunks)
        raise
    finally:
        for bitmap in bitmaps:  # the chunks hold their own copies of the images
            mtmd.mtmd_bitmap_free(bitmap)
    return MediaPrompt(projector, chunks, tokens, spans)


def _flatten(
    chunks: mtmd.mtmd_input_chunks_p, keys: list[bytes]
) -> tuple[list[int], tuple[MediaSpan, ...]]:
    tokens: list[int] = []
    spans: list[MediaSpan] = []
    parts: dict[int, int] = {}  # chunks of each media so far (a tiled image has several)
    for i in range(mtmd.mtmd_input_chunks_size(chunks)):
        chunk = require(mtmd.mtmd_input_chunks_get(chunks, i), "mtmd_input_chunks_get")
        kind = mtmd.mtmd_input_chunk_get_type(chunk)
        if kind == mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT:
            n = ctypes.c_size_t()
            ptr = mtmd.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
            tokens.extend(ptr[k] for k in range(n.value))
            continue
        index = int((mtmd.mtmd_input_chunk_get_id(chunk) or b"0").decode())
        n_tokens = mtmd.mtmd_input_chunk_get_n_tokens(chunk)
        part = parts.get(index, 0)
        parts[index] = part + 1
        span_kind: MediaKind = "audio" if kind == mtmd.MTMD_INPUT_CHUNK_TYPE_AUDIO else "image"
        spans.append(MediaSpan(len(tokens), n_tokens, span_kind, chunk))
        tokens.extend(placeholders(keys[index], part, n_tokens))
    return tokens, tuple(spans)
