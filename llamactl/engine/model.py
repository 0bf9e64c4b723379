"""A loaded GGUF model: metadata, vocabulary and tokenization.

The model owns the `llama_model` handle; contexts (slots, batching) live in `Engine`.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import llama_cpp

from llamactl.core.decision_keys import has_decision_type
from llamactl.core.errors import ModelLoadError

from ._backend import ensure_backend, held_errors, vocab_of
from .rpc import add_rpc_servers
from .tokenize_chunks import CHUNK_CHARS, SpecialCuts


@dataclass(frozen=True)
class ModelInfo:
    """What callers need to know about a model without touching llama.cpp."""

    path: Path
    architecture: str
    name: str
    description: str
    size_bytes: int
    n_params: int
    n_ctx_train: int
    n_embd: int
    n_vocab: int
    chat_template: str | None
    bos_token: str
    eos_token: str
    is_recurrent: bool
    is_hybrid: bool
    has_encoder: bool
    capabilities: tuple[str, ...]
    metadata: dict[str, str] = field(repr=False, default_factory=dict)


SplitMode = Literal["none", "layer", "row"]
_SPLIT_MODES = {
    "none": llama_cpp.LLAMA_SPLIT_MODE_NONE,
    "layer": llama_cpp.LLAMA_SPLIT_MODE_LAYER,
    "row": llama_cpp.LLAMA_SPLIT_MODE_ROW,
}


@dataclass(frozen=True)
class ModelLoad:
    """How llama.cpp places and maps the weights (llama-server's -ngl, --split-mode,
    --main-gpu, --tensor-split, --mlock, --no-mmap). `n_gpu_layers` -1 is all of them; on a
    build without a GPU backend the layers stay on the CPU whatever it says."""

    n_gpu_layers: int = -1
    split_mode: SplitMode = "layer"
    main_gpu: int = 0
    tensor_split: tuple[float, ...] = ()
    use_mmap: bool = True
    use_mlock: bool = False
    rpc_servers: tuple[str, ...] = ()  # other hosts' rpc-server, registered before loading
    # llama.cpp's CPU weight repacking (Q4_0, Q4_K, IQ4_NL... into interleaved blocks): its
    # kernels take 4 rows at a time and a lone row another way, so a row's logits would
    # depend on how many rows its batch holds. Off: the engine's exactness (docs/engine.md).
    repack: bool = False


def gpu_offload_supported() -> bool:
    """True when this llama-cpp-python was built with a GPU backend (CUDA, Metal, Vulkan...)."""
    ensure_backend()
    return bool(llama_cpp.llama_supports_gpu_offload())


def model_params(
    load: ModelLoad, *, vocab_only: bool = False
) -> tuple[llama_cpp.llama_model_params, object]:
    """llama.cpp's model parameters for `load`, and the array `tensor_split` points into (keep
    it alive until the model is loaded)."""
    add_rpc_servers(load.rpc_servers)  # before the defaults: they list the devices
    params = llama_cpp.llama_model_default_params()
    if load.split_mode not in _SPLIT_MODES:
        raise ModelLoadError(f"--split-mode: none, layer or row, got {load.split_mode!r}")
    params.n_gpu_layers = load.n_gpu_layers if gpu_offload_supported() else 0
    params.split_mode = _SPLIT_MODES[load.split_mode]
    params.main_gpu = load.main_gpu
    params.load_mode = {
        (True, False): params.load_mode,  # llama.cpp's own choice: mmap where it can
        (True, True): llama_cpp.LLAMA_LOAD_MODE_MMAP_MLOCK,
        (False, False): llama_cpp.LLAMA_LOAD_MODE_NONE,
        (False, True): llama_cpp.LLAMA_LOAD_MODE_MLOCK,
    }[(load.use_mmap, load.use_mlock)]
    split: object = None
    if load.tensor_split:
        n = llama_cpp.llama_max_devices()
        if len(load.tensor_split) > n:
            raise ModelLoadError(f"--tensor-split: at most {n} proportions (one per device)")
        split = (ctypes.c_float * n)(*load.tensor_split)
        params.tensor_split = ctypes.cast(split, ctypes.POINTER(ctypes.c_float))
    params.vocab_only = vocab_only
    params.use_extra_bufts = load.repack
    return params, split


def _load_failure(errors: list[str]) -> str:
    """llama.cpp's reason for a failed load, from its error lines (`gguf_init_from_reader:
    invalid magic characters...`, `... error loading model: REASON`), or a guess when it
    said nothing useful."""
    for line in errors:
        if "failed to load model" in line:
            continue  # the generic lines every failure ends with
        _, found, reason = line.partition("error loading model: ")
        if not found:
            reason = line.partition(": ")[2] or line
        if reason.strip():
            return reason.strip()
    return "not a GGUF file, or an architecture this llama.cpp does not know"


class Model:
    """A GGUF file loaded with llama.cpp (weights mapped, not copied, unless `load` says)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        vocab_only: bool = False,
        load: ModelLoad | None = None,
    ) -> None:
        ensure_backend()
        self.path = Path(path)
        if not self.path.is_file():
            raise ModelLoadError(f"model file not found: {self.path}")
        self.load = load or ModelLoad(n_gpu_layers=0)
        params, _split = model_params(self.load, vocab_only=vocab_only)
        with held_errors() as errors:
            handle = llama_cpp.llama_model_load_from_file(str(self.path).encode(), params)
        if not handle:
            raise ModelLoadError(
                f"llama.cpp could not load {self.path}: {_load_failure(errors)} (run with "
                "LLAMACTL_LLAMA_LOG=1 for llama.cpp's log)"
            )
        for line in errors:  # loaded after all: what llama.cpp complained of is worth a look
            logging.getLogger("llamactl.llama_cpp").error("%s", line)
        self._handle: llama_cpp.llama_model_p | None = handle
        self._vocab = vocab_of(handle)
        self.n_vocab: int = llama_cpp.llama_vocab_n_tokens(self._vocab)
        self._piece_cache: dict[tuple[int, bool], bytes] = {}
        self._piece_lock = threading.Lock()
        self._cuts: SpecialCuts | None = None
        self._cuts_read = False
        self.info = self._read_info()

    # ----------------------------------------------------------------- handles
    @property
    def handle(self) -> llama_cpp.llama_model_p:
        if self._handle is None:
            raise ModelLoadError(f"the model {self.path.name} is closed")
        return self._handle

    @property
    def vocab(self) -> llama_cpp.llama_vocab_p:
        return self._vocab

    def close(self) -> None:
        handle = getattr(self, "_handle", None)  # absent when __init__ failed
        if handle:
            llama_cpp.llama_model_free(handle)
            self._handle = None

    def __del__(self) -> None:  # best effort; Engine.close() is the deterministic path
        with contextlib.suppress(Exception):
            self.close()

    # ---------------------------------------------------------------- metadata
    def meta(self, key: str) -> str | None:
        """One GGUF metadata value as a string, or None when absent."""
        size = 256
        while True:
            buf = ctypes.create_string_buffer(size)
            n = llama_cpp.llama_model_meta_val_str(self.handle, key.encode(), buf, size)
            if n < 0:
                return None
            if n < size:
                return buf.value.decode("utf-8", "replace")
            size = n + 1

    def _all_meta(self) -> dict[str, str]:
        out: dict[str, str] = {}
        buf = ctypes.create_string_buffer(512)
        for i in range(llama_cpp.llama_model_meta_count(self.handle)):
            n = llama_cpp.llama_model_meta_key_by_index(self.handle, i, buf, 512)
            if n < 0:
                continue
            key = buf.value.decode("utf-8", "replace")
            if key.startswith("tokenizer.ggml.") and key.endswith(("tokens", "merges", "scores")):
                continue  # large arrays nobody reads as strings
            value = self.meta(key)
            if value is not None:
                out[key] = value
        return out

    def _read_info(self) -> ModelInfo:
        h = self.handle
        metadata = self._all_meta()
        arch = metadata.get("general.architecture", "unknown")
        desc = ctypes.create_string_buffer(256)
        llama_cpp.llama_model_desc(h, desc, 256)
        template = llama_cpp.llama_model_chat_template(h, None)
        caps = ["chat"] if llama_cpp.llama_model_has_decoder(h) else []
        if has_decision_type(metadata, arch):
            caps = ["decide"]
        if metadata.get(f"{arch}.pooling_type") not in (None, "0"):
            caps.append("embed")
        bos = llama_cpp.llama_vocab_bos(self._vocab)
        eos = llama_cpp.llama_vocab_eos(self._vocab)
        return ModelInfo(
            path=self.path,
            architecture=arch,
            name=metadata.get("general.name", self.path.stem),
            description=desc.value.decode("utf-8", "replace"),
            size_bytes=self.path.stat().st_size,
            n_params=llama_cpp.llama_model_n_params(h),
            n_ctx_train=llama_cpp.llama_model_n_ctx_train(h),
            n_embd=llama_cpp.llama_model_n_embd(h),
            n_vocab=self.n_vocab,
            chat_template=template.decode("utf-8", "replace") if template else None,
            bos_token=self.token_text(bos) if bos >= 0 else "",
            eos_token=self.token_text(eos) if eos >= 0 else "",
            is_recurrent=bool(llama_cpp.llama_model_is_recurrent(h)),
            is_hybrid=bool(llama_cpp.llama_model_is_hybrid(h)),
            has_encoder=bool(llama_cpp.llama_model_has_encoder(h)),
            capabilities=tuple(caps),
            metadata=metadata,
        )

    # ------------------------------------------------------------ vocabulary
    @property
    def bos_token_id(self) -> int:
        return llama_cpp.llama_vocab_bos(self._vocab)

    @property
    def eos_token_id(self) -> int:
        return llama_cpp.llama_vocab_eos(self._vocab)

    def is_eog(self, token: int) -> bool:
        """End of generation: EOS, EOT and the other stop tokens the vocab declares."""
        return bool(llama_cpp.llama_vocab_is_eog(self._vocab, token))

    @functools.cached_property
    def eog_tokens(self) -> tuple[int, ...]:
        """Every end-of-generation token (read once: `ignore_eos` bans them all)."""
        return tuple(t for t in range(self.n_vocab) if self.is_eog(t))

    def token_text(self, token: int) -> str:
        return self.token_bytes(token, special=True).decode("utf-8", "replace")

    def token_bytes(self, token: int, *, special: bool = False) -> bytes:
        """The bytes one token renders to (cached: the hot path of streaming)."""
        key = (token, special)
        cached = self._piece_cache.get(key)
        if cached is not None:
            return cached
        size = 32
        while True:
            buf = ctypes.create_string_buffer(size)
            n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, size, 0, special)
            if n >= 0:
                piece = buf.raw[:n]
                break
            size = -n
        with self._piece_lock:
            self._piece_cache[key] = piece
        return piece

    def tokenize(
        self,
        text: str,
        *,
        add_special: bool = True,
        parse_special: bool = True,
        limit: int | None = None,
    ) -> list[int]:
        """Text to token ids; `add_special` adds BOS where the model wants it.

        A long text with special tokens is tokenised in pieces cut before them, which gives
        the same tokens without llama.cpp's quadratic special-token search (tokenize_chunks).
        With `limit`, tokenising may stop once more than `limit` tokens are found: the result
        is then a prefix, longer than `limit`."""
        if not parse_special or len(text) <= CHUNK_CHARS:
            return self._tokenize(text, add_special, parse_special)
        cuts = self._special_cuts()
        if cuts is None:
            return self._tokenize(text, add_special, parse_special)
        tokens: list[int] = []
        for i, piece in enumerate(cuts.pieces(text)):
            tokens += self._tokenize(piece, add_special and i == 0, True)
            if limit is not None and len(tokens) > limit:
                break
        return tokens

    def _special_cuts(self) -> SpecialCuts | None:
        """None where pieces could differ from one call: tokenizers that add tokens at the
        end of a text (EOS, SEP) or that are not BPE or SentencePiece."""
        with self._piece_lock:
            if not self._cuts_read:
                vocab = self._vocab
                kind = llama_cpp.llama_vocab_type(vocab)
                ends = llama_cpp.llama_vocab_get_add_eos(vocab)
                ends = ends or llama_cpp.llama_vocab_get_add_sep(vocab)
                chunkable = kind in (llama_cpp.LLAMA_VOCAB_TYPE_BPE, llama_cpp.LLAMA_VOCAB_TYPE_SPM)
                self._cuts = SpecialCuts.of_vocab(vocab) if chunkable and not ends else None
                self._cuts_read = True
            return self._cuts

    def _tokenize(self, text: str, add_special: bool, parse_special: bool) -> list[int]:
        data = text.encode("utf-8")
        n_max = len(data) + 8
        while True:
            arr = (llama_cpp.llama_token * n_max)()
            n = llama_cpp.llama_tokenize(
                self._vocab, data, len(data), arr, n_max, add_special, parse_special
            )
            if n >= 0:
                return list(arr[:n])
            n_max = -n

    def detokenize(self, tokens: list[int], *, special: bool = False) -> str:
        return b"".join(self.token_bytes(t, special=special) for t in tokens).decode(
            "utf-8", "replace"
        )
