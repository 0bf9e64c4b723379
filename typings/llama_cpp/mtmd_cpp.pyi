import ctypes
from typing import Any, NewType, TypeAlias

from .llama_cpp import llama_context_p, llama_model_p

mtmd_context_p = NewType("mtmd_context_p", int)
mtmd_bitmap_p = NewType("mtmd_bitmap_p", int)
mtmd_input_chunk_p = NewType("mtmd_input_chunk_p", int)
mtmd_input_chunks_p = NewType("mtmd_input_chunks_p", int)
mtmd_bitmap_p_ctypes: TypeAlias = ctypes.c_void_p

MTMD_INPUT_CHUNK_TYPE_TEXT: int
MTMD_INPUT_CHUNK_TYPE_IMAGE: int
MTMD_INPUT_CHUNK_TYPE_AUDIO: int

class mtmd_context_params(ctypes.Structure):
    use_gpu: bool
    print_timings: bool
    n_threads: int
    flash_attn_type: int
    warmup: bool

class mtmd_input_text(ctypes.Structure):
    text: bytes | None
    text_len: int
    add_special: bool
    parse_special: bool
    def __init__(
        self,
        text: bytes = ...,
        text_len: int = ...,
        add_special: bool = ...,
        parse_special: bool = ...,
    ) -> None: ...

class mtmd_gen_audio_info(ctypes.Structure):
    type: int
    sample_rate: int
    model_variant: bytes | None

# int32_t (*)(const struct mtmd_helper_embd_batch * batch, void * user_data); called with no
# arguments it is the NULL function pointer
mtmd_helper_post_decode_callback: type[ctypes._CFunctionType]

def mtmd_log_set(log_callback: ctypes._CFunctionType, user_data: Any, /) -> None: ...
def mtmd_helper_log_set(log_callback: ctypes._CFunctionType, user_data: Any, /) -> None: ...
def mtmd_default_marker() -> bytes: ...

# context
def mtmd_context_params_default() -> mtmd_context_params: ...
def mtmd_init_from_file(
    mmproj_fname: bytes, text_model: llama_model_p, ctx_params: mtmd_context_params, /
) -> mtmd_context_p | None: ...
def mtmd_free(ctx: mtmd_context_p, /) -> None: ...
def mtmd_support_vision(ctx: mtmd_context_p, /) -> bool: ...
def mtmd_decode_use_mrope(ctx: mtmd_context_p, /) -> bool: ...
def mtmd_support_audio(ctx: mtmd_context_p, /) -> bool: ...
def mtmd_get_audio_sample_rate(ctx: mtmd_context_p, /) -> int: ...
def mtmd_get_marker(ctx: mtmd_context_p, /) -> bytes | None: ...
def mtmd_gen_audio_get_info(ctx: mtmd_context_p, /) -> mtmd_gen_audio_info: ...

# bitmaps (images, audio)
def mtmd_helper_bitmap_init_from_buf(
    ctx: mtmd_context_p,
    buf: ctypes.Array[ctypes.c_uint8],
    length: int,
    placeholder: bool,
    opt: Any = None,
    /,
) -> mtmd_bitmap_p | None: ...
def mtmd_bitmap_init_from_audio(
    n_samples: int, data: ctypes.Array[ctypes.c_float], /
) -> mtmd_bitmap_p | None: ...
def mtmd_bitmap_set_id(bitmap: mtmd_bitmap_p, id: bytes | None, /) -> None: ...
def mtmd_bitmap_free(bitmap: mtmd_bitmap_p, /) -> None: ...
def mtmd_bitmap_is_audio(bitmap: mtmd_bitmap_p, /) -> bool: ...

# tokenized prompts: chunks of text tokens and media
def mtmd_input_chunks_init() -> mtmd_input_chunks_p | None: ...
def mtmd_input_chunks_free(chunks: mtmd_input_chunks_p, /) -> None: ...
def mtmd_input_chunks_size(chunks: mtmd_input_chunks_p, /) -> int: ...
def mtmd_input_chunks_get(
    chunks: mtmd_input_chunks_p, idx: int, /
) -> mtmd_input_chunk_p | None: ...
def mtmd_tokenize(
    ctx: mtmd_context_p,
    output: mtmd_input_chunks_p,
    text: Any,  # byref(mtmd_input_text)
    bitmaps: ctypes.Array[ctypes.c_void_p],
    n_bitmaps: int,
    /,
) -> int: ...
def mtmd_input_chunk_get_type(chunk: mtmd_input_chunk_p, /) -> int: ...
def mtmd_input_chunk_get_tokens_text(
    chunk: mtmd_input_chunk_p,
    n_tokens_output: Any,
    /,  # byref(c_size_t)
) -> ctypes._Pointer[ctypes.c_int32]: ...
def mtmd_input_chunk_get_n_tokens(chunk: mtmd_input_chunk_p, /) -> int: ...
def mtmd_input_chunk_get_n_pos(chunk: mtmd_input_chunk_p, /) -> int: ...
def mtmd_input_chunk_get_id(chunk: mtmd_input_chunk_p, /) -> bytes | None: ...

# encoding and decoding media
def mtmd_encode_chunk(ctx: mtmd_context_p, chunk: mtmd_input_chunk_p, /) -> int: ...
def mtmd_get_output_embd(ctx: mtmd_context_p, /) -> ctypes._Pointer[ctypes.c_float]: ...
def mtmd_helper_decode_image_chunk(
    ctx: mtmd_context_p,
    lctx: llama_context_p,
    chunk: mtmd_input_chunk_p,
    encoded_embd: ctypes._Pointer[ctypes.c_float],
    n_past: int,
    seq_id: int,
    n_batch: int,
    new_n_past: Any,  # byref(llama_pos)
    callback: ctypes._CFunctionType,
    user_data: Any,
    /,
) -> int: ...
def mtmd_helper_eval_chunk_single(
    ctx: mtmd_context_p,
    lctx: llama_context_p,
    chunk: mtmd_input_chunk_p,
    n_past: int,
    seq_id: int,
    n_batch: int,
    logits_last: bool,
    new_n_past: Any,  # byref(llama_pos)
    /,
) -> int: ...
def mtmd_helper_eval_chunks(
    ctx: mtmd_context_p,
    lctx: llama_context_p,
    chunks: mtmd_input_chunks_p,
    n_past: int,
    seq_id: int,
    n_batch: int,
    logits_last: bool,
    new_n_past: Any,  # byref(llama_pos)
    /,
) -> int: ...

# audio generation (the TTS helper and the stateless process call it is built on)
mtmd_helper_gen_audio_p = NewType("mtmd_helper_gen_audio_p", int)
MTMD_HELPER_GEN_AUDIO_OUTTYPE_PCM: int
MTMD_HELPER_GEN_AUDIO_OUTTYPE_WAV: int
MTMD_GEN_PROCESS_TYPE_GEN_CODE: int
MTMD_GEN_PROCESS_TYPE_GEN_WAV: int

class mtmd_helper_gen_audio_inp(ctypes.Structure):
    seq_id: int
    prompt: bytes | None
    prompt_len: int
    speaker_ref: mtmd_bitmap_p | None
    lang: bytes | None
    top_k: int
    top_p: float
    seed: int
    out_type: int

class mtmd_gen_inp(ctypes.Structure):
    type: int
    code0: int
    embd: Any
    top_k: int
    top_p: float
    seed: int
    temp: float

class mtmd_gen_out(ctypes.Structure):
    is_eos: bool

def mtmd_gen_inp_default(ctx: mtmd_context_p, /) -> mtmd_gen_inp: ...
def mtmd_gen_audio_process(ctx: mtmd_context_p, inp: Any, out: Any, /) -> int: ...
def mtmd_bitmap_get_nx(bitmap: mtmd_bitmap_p, /) -> int: ...
def mtmd_helper_gen_audio_init(
    lctx: llama_context_p, mctx: mtmd_context_p, /
) -> mtmd_helper_gen_audio_p | None: ...
def mtmd_helper_gen_audio_free(ctx: mtmd_helper_gen_audio_p, /) -> None: ...
def mtmd_helper_gen_audio_reset(ctx: mtmd_helper_gen_audio_p, /) -> None: ...
def mtmd_helper_gen_audio_set_input(ctx: mtmd_helper_gen_audio_p, inp: Any, /) -> int: ...
def mtmd_helper_gen_audio_step_prompt(ctx: mtmd_helper_gen_audio_p, n_batch: int, /) -> int: ...
def mtmd_helper_gen_audio_step_gen(
    ctx: mtmd_helper_gen_audio_p, sampled: int, h_state_in: Any, h_state_out: Any, out_stop: Any, /
) -> int: ...
def mtmd_helper_gen_audio_get_output(
    ctx: mtmd_helper_gen_audio_p,
    out_sample_rate: Any,
    out_data: Any,
    out_data_len: Any,
    out_n_samples: Any,
    /,
) -> int: ...
