"""Pocket TTS (Kyutai's CALM text-to-speech) to the two files llama.cpp speaks with.

A Pocket TTS checkpoint is one `model.safetensors` (no config.json: every size is read from
the tensor shapes) and a sentencepiece unigram `tokenizer.model`. llama.cpp splits it:

- the **backbone** (`pockettts` architecture): `flow_lm.transformer` as a text model whose
  token table also carries the two learned input vectors (`bos_before_voice`, and `bos_emb`
  taken through `input_linear` into the backbone's space), with a T5-style (UGM) vocabulary;
- the **mmproj**: the voice encoder (mimi's SEANet encoder, transformer and downsampling, then
  `speaker_proj`) and the generator (the flow net with its end-of-speech head, then mimi's
  decoder), which `mtmd` runs as `pockettts_spkenc` and `pockettts_gen`.

The layout is the one of llama.cpp b11434's `conversion/pockettts.py`, written with numpy (no
torch); the mmproj's model variant is the checkpoint folder's name, as there, since llama.cpp
keys a few sampling settings on it ("english", "english_2026-04", ...).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import gguf

from llamactl.core.errors import CheckpointError

from . import sentencepiece as sp
from .checkpoint import Checkpoint
from .lazy import Lazy, concat
from .plan import GGUFPlan, OutTensor, OutType
from .textmodel import write_general

__all__ = ["TYPE", "is_pockettts", "plan", "plan_mmproj"]

TYPE = "pocket-tts"
ARCH = "pockettts"
SAMPLE_RATE = 24000
HEAD_DIM = 64  # not in the checkpoint; every released size uses 64
N_SEANET_STAGES = 3
_F16 = gguf.GGMLQuantizationType.F16

_LAYER = re.compile(r"flow_lm\.transformer\.layers\.(\d+)\.(.+)\.(weight|bias)$")
_BACKBONE_LAYER = {
    "norm1": "attn_norm",
    "norm2": "ffn_norm",
    "self_attn.out_proj": "attn_output",
    "linear1": "ffn_up",
    "linear2": "ffn_down",
}
# mimi transformer layer parts: the encoder's names (prefix "a") and the decoder's
_MIMI_LAYER = {
    "norm1": "ln1",
    "norm2": "ln2",
    "self_attn.out_proj": "attn_out",
    "linear1": "ffn_up",
    "linear2": "ffn_down",
    "layer_scale_1": "ls1",
    "layer_scale_2": "ls2",
}
_FLOW_SIMPLE = {
    "input_proj": "a.gen.flow.input_proj",
    "cond_embed": "a.gen.flow.cond_embd",
    "final_layer.linear": "a.gen.flow.final.proj",
    "final_layer.adaLN_modulation.1": "a.gen.flow.final.ada",
}
_FLOW_BLOCK = {
    "in_ln": "norm",
    "mlp.0": "up",
    "mlp.2": "down",
    "adaLN_modulation.1": "ada",
}


def is_pockettts(ckpt: Checkpoint) -> bool:
    """A Pocket TTS checkpoint: no config.json, and the flow LM's audio BOS among its weights."""
    if ckpt.has("config.json"):
        return False
    try:
        return "flow_lm.bos_emb" in ckpt.tensor_entries
    except CheckpointError:
        return False


class _Sizes:
    """Every size of the model, from the tensor shapes (the checkpoint has no config)."""

    def __init__(self, ckpt: Checkpoint) -> None:
        entries = ckpt.tensor_entries

        def shape(name: str) -> tuple[int, ...]:
            if name not in entries:
                raise CheckpointError(ckpt.dir / "model.safetensors", name, "missing tensor")
            return tuple(entries[name].shape)

        self.n_rows, self.n_embd = shape("flow_lm.conditioner.embed.weight")
        self.n_layer = sum(
            1
            for n in entries
            if re.fullmatch(r"flow_lm\.transformer\.layers\.\d+\.norm1\.weight", n)
        )
        self.n_ff = shape("flow_lm.transformer.layers.0.linear1.weight")[0]
        self.n_latent = shape("flow_lm.bos_emb")[-1]
        mimi = "mimi.encoder_transformer.transformer.layers"
        self.mimi_layers = sum(
            1 for n in entries if re.fullmatch(rf"{mimi}\.\d+\.norm1\.weight", n)
        )
        self.mimi_embd = shape(f"{mimi}.0.norm1.weight")[0]
        self.mimi_ff = shape(f"{mimi}.0.linear1.weight")[0]
        self.has_bos_before_voice = "flow_lm.bos_before_voice" in entries
        for what, width in (("flow_lm", self.n_embd), ("mimi", self.mimi_embd)):
            if width % HEAD_DIM:
                raise CheckpointError(
                    ckpt.dir / "model.safetensors",
                    what,
                    f"width {width} is not a multiple of the {HEAD_DIM}-wide heads",
                )

    @property
    def extra_tokens(self) -> list[str]:
        """Names of the table's last rows: the conditioner's padding row, then the learned
        input vectors appended to it."""
        names = ["<|pad|>"]
        if self.has_bos_before_voice:
            names.append("<|bos_before_voice|>")
        return [*names, "<|audio_bos|>"]

    @property
    def vocab_size(self) -> int:
        return self.n_rows + len(self.extra_tokens) - 1


# ------------------------------------------------------------------------------ backbone
def plan(ckpt: Checkpoint, out: OutType) -> GGUFPlan:
    """The backbone GGUF: the flow LM's transformer and its vocabulary."""
    size = _Sizes(ckpt)
    model = _read_tokenizer(ckpt)
    tensors = [OutTensor("token_embd.weight", _embedding_table(ckpt, size))]
    for name in ckpt.tensor_names():
        if name.startswith("flow_lm.out_norm."):
            tensors.append(OutTensor(f"output_norm.{name.rsplit('.', 1)[1]}", ckpt.lazy(name)))
            continue
        m = _LAYER.match(name)
        if m is None:
            continue
        bid, part, suffix = m.groups()
        if part == "self_attn.in_proj":
            q, k, v = _thirds(ckpt.lazy(name))
            for letter, third in zip("qkv", (q, k, v), strict=True):
                tensors.append(OutTensor(f"blk.{bid}.attn_{letter}.{suffix}", third))
        elif part in _BACKBONE_LAYER:
            tensors.append(
                OutTensor(f"blk.{bid}.{_BACKBONE_LAYER[part]}.{suffix}", ckpt.lazy(name))
            )

    def write_metadata(w: gguf.GGUFWriter, o: OutType) -> None:
        write_general(w, kind="model", card_dir=ckpt.dir)
        # the transformer is causal with no limit of its own: this only bounds the KV cache
        w.add_context_length(4096)
        w.add_embedding_length(size.n_embd)
        w.add_block_count(size.n_layer)
        w.add_feed_forward_length(size.n_ff)
        w.add_head_count(size.n_embd // HEAD_DIM)
        w.add_rope_freq_base(10000.0)
        w.add_layer_norm_eps(1e-5)
        w.add_file_type(o.file_type)
        w.add_quantization_version(gguf.GGML_QUANT_VERSION)
        _write_vocab(w, model, size)

    return GGUFPlan(ARCH, "model", f"{TYPE} ({ARCH})", tensors, write_metadata)


def _thirds(fused: Lazy) -> tuple[Lazy, Lazy, Lazy]:
    n = fused.shape[0] // 3
    return fused.rows(0, n), fused.rows(n, 2 * n), fused.rows(2 * n, 3 * n)


def _embedding_table(ckpt: Checkpoint, size: _Sizes) -> Lazy:
    """The conditioner's table with the learned vectors as extra rows: `bos_before_voice` as
    it is, and `bos_emb`, a latent, through `input_linear` into the backbone's space."""
    rows = [ckpt.lazy("flow_lm.conditioner.embed.weight")]
    if size.has_bos_before_voice:
        rows.append(ckpt.lazy("flow_lm.bos_before_voice").reshape(1, -1))
    bos = ckpt.lazy("flow_lm.bos_emb")
    linear = ckpt.lazy("flow_lm.input_linear.weight")
    rows.append(
        Lazy(
            (1, size.n_embd),
            lambda: (linear() @ bos().reshape(-1)).reshape(1, -1),
            "flow_lm.input_linear.weight @ flow_lm.bos_emb",
        )
    )
    return concat(rows)


def _read_tokenizer(ckpt: Checkpoint) -> sp.SentencePieceModel:
    path = ckpt.dir / "tokenizer.model"
    if not path.is_file():
        raise CheckpointError(path, None, "file not found (Pocket TTS's sentencepiece model)")
    model = sp.read_sentencepiece(path)
    if model.model_type != sp.UNIGRAM:
        raise CheckpointError(path, "trainer_spec.model_type", "expected a unigram model")
    return model


def _write_vocab(w: gguf.GGUFWriter, model: sp.SentencePieceModel, size: _Sizes) -> None:
    """The pieces as llama.cpp's UGM tokenizer reads them, padded to the table's rows, whose
    last rows are named after the vectors they hold."""
    n = size.vocab_size
    if len(model.pieces) > n:
        raise CheckpointError(
            "tokenizer.model", None, f"{len(model.pieces)} pieces for a {n}-row table"
        )
    tokens = [p.text.encode("utf-8") for p in model.pieces]
    scores = [p.score for p in model.pieces]
    kinds = [p.kind for p in model.pieces]
    for i in range(len(tokens), n):
        tokens.append(f"[PAD{i}]".encode())
        scores.append(-1000.0)
        kinds.append(sp.UNUSED)
    for i, name in enumerate(size.extra_tokens):
        at = n - len(size.extra_tokens) + i
        tokens[at], scores[at], kinds[at] = name.encode(), -1000.0, sp.CONTROL
    twice = _first_repeat(tokens)
    if twice is not None:  # llama.cpp aborts on a vocabulary like that
        raise CheckpointError(
            "tokenizer.model", None, f"the piece {twice.decode(errors='replace')!r} is there twice"
        )
    w.add_tokenizer_model("t5")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(kinds)
    w.add_add_space_prefix(model.add_dummy_prefix)
    w.add_remove_extra_whitespaces(model.remove_extra_whitespaces)
    if model.precompiled_charsmap:
        w.add_precompiled_charsmap(model.precompiled_charsmap)
    w.add_add_bos_token(False)
    w.add_add_eos_token(False)


def _first_repeat(tokens: list[bytes]) -> bytes | None:
    seen: set[bytes] = set()
    for token in tokens:
        if token in seen:
            return token
        seen.add(token)
    return None


# -------------------------------------------------------------------------------- mmproj
def plan_mmproj(ckpt: Checkpoint, out: OutType) -> GGUFPlan:
    """The mmproj: the voice encoder and the audio generator."""
    size = _Sizes(ckpt)
    tensors: list[OutTensor] = []
    for name in ckpt.tensor_names():
        tensors.extend(_mmproj_tensors(name, ckpt.lazy(name)))

    def mimi_transformer(w: gguf.GGUFWriter, prefix: str) -> None:
        """The shape of mimi's transformer, as each of the two encoders reads it."""
        w.add_uint32(f"{prefix}.projection_dim", size.n_embd)
        w.add_uint32(f"{prefix}.block_count", size.mimi_layers)
        w.add_uint32(f"{prefix}.embedding_length", size.mimi_embd)
        w.add_uint32(f"{prefix}.feed_forward_length", size.mimi_ff)
        w.add_uint32(f"{prefix}.attention.head_count", size.mimi_embd // HEAD_DIM)
        w.add_float32(f"{prefix}.attention.layer_norm_epsilon", 1e-5)

    def write_metadata(w: gguf.GGUFWriter, o: OutType) -> None:
        write_general(w, kind="mmproj", card_dir=ckpt.dir)
        w.add_file_type(o.file_type)
        w.add_bool("clip.has_vision_encoder", False)
        # the voice encoder (sample rate 24 kHz on llama.cpp's side, as its other audio models)
        w.add_bool("clip.has_audio_encoder", True)
        w.add_string("clip.audio.projector_type", "pockettts_spkenc")
        mimi_transformer(w, "clip.audio")
        w.add_uint32("clip.audio.num_mel_bins", 1)  # mimi convolves the waveform itself
        # the generator: the flow net, then mimi's decoder
        w.add_bool("clip.has_gen_audio_encoder", True)
        w.add_string("clip.gen.audio.projector_type", "pockettts_gen")
        mimi_transformer(w, "clip.gen.audio")
        w.add_string("clip.gen.audio.model_variant", ckpt.dir.name)

    return GGUFPlan("clip", "mmproj", f"{TYPE} (clip)", tensors, write_metadata)


def _mmproj_tensors(name: str, data: Lazy) -> Iterable[OutTensor]:
    suffix = name.rsplit(".", 1)[1]
    if name in ("flow_lm.bos_emb", "flow_lm.bos_before_voice", "flow_lm.conditioner.embed.weight"):
        return  # rows of the backbone's table
    if name.startswith(("flow_lm.transformer.", "flow_lm.out_norm.")):
        return  # the backbone
    single = {
        "flow_lm.speaker_proj_weight": "a.speaker_proj.weight",
        "flow_lm.input_linear.weight": "a.gen.input_linear.weight",
        "flow_lm.emb_mean": "a.gen.emb_mean",
        "flow_lm.emb_std": "a.gen.emb_std",
    }
    if name in single:
        yield OutTensor(single[name], data)
    elif name.startswith("flow_lm.out_eos."):
        yield OutTensor(f"a.gen.out_eos.{suffix}", data)
    elif name.startswith("flow_lm.flow_net."):
        yield from _flow_tensor(name.removeprefix("flow_lm.flow_net."), suffix, data)
    elif name == "mimi.downsample.conv.conv.weight":
        yield OutTensor("a.downsample.conv.weight", data, force=_F16)
    elif name == "mimi.upsample.convtr.convtr.weight":
        yield OutTensor("a.gen.wav.upsample.weight", data, force=_F16)
    elif name == "mimi.quantizer.output_proj.weight":
        yield OutTensor("a.gen.wav.quant_out.weight", data.squeeze(-1))
    elif "_transformer.transformer.layers." in name:
        yield from _mimi_layer_tensor(name, data)
    elif name.startswith(("mimi.encoder.model.", "mimi.decoder.model.")):
        yield from _seanet_tensor(name, suffix, data)


def _flow_tensor(key: str, suffix: str, data: Lazy) -> Iterable[OutTensor]:
    stem = key.rsplit(".", 1)[0]
    if stem in _FLOW_SIMPLE:
        yield OutTensor(f"{_FLOW_SIMPLE[stem]}.{suffix}", data)
        return
    m = re.fullmatch(r"time_embed\.(\d+)\.(.+)", key)
    if m:
        bid, rest = m.groups()
        if rest == "freqs":
            yield OutTensor(f"a.gen.flow.time.{bid}.freqs", data)
        elif rest == "mlp.3.alpha":
            yield OutTensor(f"a.gen.flow.time.{bid}.norm", data)
        elif rest.rsplit(".", 1)[0] in ("mlp.0", "mlp.2"):
            part = "up" if rest.startswith("mlp.0") else "down"
            yield OutTensor(f"a.gen.flow.time.{bid}.{part}.{suffix}", data)
        return
    m = re.fullmatch(r"res_blocks\.(\d+)\.(.+)\.(weight|bias)", key)
    if m and m.group(2) in _FLOW_BLOCK:
        yield OutTensor(f"a.gen.flow.blk.{m.group(1)}.{_FLOW_BLOCK[m.group(2)]}.{suffix}", data)


def _mimi_layer_tensor(name: str, data: Lazy) -> Iterable[OutTensor]:
    prefix = "a.gen.wav.tfm" if name.startswith("mimi.decoder_transformer.") else "a"
    bid, rest = re.split(r"\.", name.split("_transformer.transformer.layers.", 1)[1], maxsplit=1)
    if rest == "self_attn.in_proj.weight":
        for letter, third in zip("qkv", _thirds(data), strict=True):
            yield OutTensor(f"{prefix}.blk.{bid}.attn_{letter}.weight", third)
        return
    stem, suffix = rest.rsplit(".", 1)
    if stem in _MIMI_LAYER:
        # layer scales are `.scale` in the checkpoint, weights to llama.cpp
        suffix = "weight" if suffix == "scale" else suffix
        yield OutTensor(f"{prefix}.blk.{bid}.{_MIMI_LAYER[stem]}.{suffix}", data)


def _seanet_tensor(name: str, suffix: str, data: Lazy) -> Iterable[OutTensor]:
    """SEANet's `model.<i>` sequence: a conv in, per stage a residual block and a (transposed)
    strided conv, a conv out; the ELUs between them hold no weights."""
    decoder = name.startswith("mimi.decoder.")
    base = "a.gen.wav.seanet" if decoder else "a.seanet"
    idx = int(name.split(".model.", 1)[1].split(".", 1)[0])
    if idx == 0:
        yield OutTensor(
            f"{base}.conv_in.{suffix}", data, force=_F16 if suffix == "weight" else None
        )
        return
    if idx == 3 * N_SEANET_STAGES + 2:
        yield OutTensor(
            f"{base}.conv_out.{suffix}", data, force=_F16 if suffix == "weight" else None
        )
        return
    for stage in range(N_SEANET_STAGES):
        res_idx = 3 + 3 * stage if decoder else 1 + 3 * stage
        scale_idx = 2 + 3 * stage if decoder else 3 + 3 * stage
        force = _F16 if suffix == "weight" else None
        if idx == scale_idx:
            yield OutTensor(f"{base}.blk.{stage}.scale_conv.{suffix}", data, force=force)
            return
        if idx == res_idx:
            # block.1 is the dilated conv, block.3 the pointwise one (0 and 2 are ELUs)
            inner = int(name.split(".block.", 1)[1].split(".", 1)[0])
            part = "res_conv1" if inner == 1 else "res_conv2"
            yield OutTensor(f"{base}.blk.{stage}.{part}.{suffix}", data, force=force)
            return
