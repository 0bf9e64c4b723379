"""A tiny random-weight Pocket TTS checkpoint, in the release's layout.

Every tensor the release has, with its name and its shape's structure (a SEANet of three
stages with strides 4, 5, 6, a mimi transformer on each side, the flow net, the flow LM), at
widths small enough to build in a moment: 64-wide transformers (one head each), a 32-d latent,
SEANet channels 4 to 32. llama.cpp loads the converted pair and generates with it for real;
the speech is noise, which is all a test of the generation path needs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from .safetensors_io import save_file
from .sentencepiece import CONTROL, NORMAL, UNKNOWN, Piece, SentencePieceModel, write_sentencepiece

__all__ = ["build_pockettts"]

EMBD = 64  # flow LM width
LAYERS = 2
FF = 128
LATENT = 32
FLOW = 32  # flow net width
FLOW_BLOCKS = 2
FREQS = 8  # time embedding frequencies (the embedding is twice as wide: cos and sin)
MIMI = 64  # mimi transformer width
MIMI_FF = 128
SEANET = (4, 8, 16, 32)  # encoder channels in, per stage; the decoder mirrors them
RATIOS = (4, 5, 6)  # encoder strides; 4 * 5 * 6 * 16 = 1920 samples a 12.5 Hz frame
DOWNSAMPLE = 16


def _pieces() -> list[Piece]:
    """A unigram vocabulary any English text segments into: letters (with and without the
    word-start mark), digits, punctuation, a few whole words."""
    pieces = [
        Piece("<pad>", 0.0, CONTROL),
        Piece("</s>", 0.0, CONTROL),
        Piece("<unk>", 0.0, UNKNOWN),
    ]
    words = ["▁the", "▁hello", "▁to", "▁me", "▁say", "▁and", "▁is"]
    pieces += [Piece(w, -3.0, NORMAL) for w in words]
    chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,!?'-:;"
    pieces.append(Piece("▁", -4.0, NORMAL))
    pieces += [Piece(f"▁{c}", -5.0, NORMAL) for c in chars]
    pieces += [Piece(c, -6.0, NORMAL) for c in chars]
    return pieces


def build_pockettts(path: Path, *, seed: int = 0, eos_after: float = 0.0) -> Path:
    """Write `model.safetensors` and `tokenizer.model` into `path`.

    `eos_after`: the end-of-speech head's bias. The default (0) scores above llama.cpp's
    threshold (-4), so each chunk ends after its few frames of tail; a very negative bias
    never ends one, and generation runs to the chunk's length budget."""
    path.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    t: dict[str, np.ndarray] = {}

    def w(name: str, *shape: int, scale: float | None = None) -> None:
        fan_in = shape[-1] if len(shape) > 1 else 1
        if len(shape) == 3:
            fan_in = shape[1] * shape[2]
        std = scale if scale is not None else 1.0 / np.sqrt(fan_in)
        t[name] = (rng.standard_normal(shape) * std).astype(np.float32)

    def ones(name: str, n: int, value: float = 1.0) -> None:
        t[name] = np.full(n, value, np.float32)

    def norm(name: str, n: int) -> None:
        ones(f"{name}.weight", n)
        t[f"{name}.bias"] = np.zeros(n, np.float32)

    pieces = _pieces()
    # the flow LM
    w("flow_lm.conditioner.embed.weight", len(pieces) + 1, EMBD, scale=0.5)
    w("flow_lm.bos_emb", LATENT, scale=1.0)
    w("flow_lm.bos_before_voice", EMBD, scale=0.5)
    w("flow_lm.input_linear.weight", EMBD, LATENT)
    ones("flow_lm.emb_mean", LATENT, 0.0)
    ones("flow_lm.emb_std", LATENT, 1.0)
    w("flow_lm.speaker_proj_weight", EMBD, MIMI)
    norm("flow_lm.out_norm", EMBD)
    w("flow_lm.out_eos.weight", 1, EMBD, scale=0.01)
    t["flow_lm.out_eos.bias"] = np.full(1, eos_after, np.float32)

    def layer(p: str, embd: int, ff: int) -> None:
        """One transformer layer of the flow LM's or mimi's."""
        norm(f"{p}.norm1", embd)
        norm(f"{p}.norm2", embd)
        w(f"{p}.self_attn.in_proj.weight", 3 * embd, embd)
        w(f"{p}.self_attn.out_proj.weight", embd, embd)
        w(f"{p}.linear1.weight", ff, embd)
        w(f"{p}.linear2.weight", embd, ff)

    for i in range(LAYERS):
        layer(f"flow_lm.transformer.layers.{i}", EMBD, FF)
    # the flow net
    f = "flow_lm.flow_net"
    w(f"{f}.input_proj.weight", FLOW, LATENT)
    w(f"{f}.input_proj.bias", FLOW, scale=0.1)
    w(f"{f}.cond_embed.weight", FLOW, EMBD)
    w(f"{f}.cond_embed.bias", FLOW, scale=0.1)
    for i in range(2):
        t[f"{f}.time_embed.{i}.freqs"] = np.exp(-np.arange(FREQS) / FREQS).astype(np.float32)
        w(f"{f}.time_embed.{i}.mlp.0.weight", FLOW, 2 * FREQS)
        w(f"{f}.time_embed.{i}.mlp.0.bias", FLOW, scale=0.1)
        w(f"{f}.time_embed.{i}.mlp.2.weight", FLOW, FLOW)
        w(f"{f}.time_embed.{i}.mlp.2.bias", FLOW, scale=0.1)
        ones(f"{f}.time_embed.{i}.mlp.3.alpha", FLOW)
    for i in range(FLOW_BLOCKS):
        p = f"{f}.res_blocks.{i}"
        norm(f"{p}.in_ln", FLOW)
        w(f"{p}.mlp.0.weight", FLOW, FLOW)
        w(f"{p}.mlp.0.bias", FLOW, scale=0.1)
        w(f"{p}.mlp.2.weight", FLOW, FLOW)
        w(f"{p}.mlp.2.bias", FLOW, scale=0.1)
        w(f"{p}.adaLN_modulation.1.weight", 3 * FLOW, FLOW)
        w(f"{p}.adaLN_modulation.1.bias", 3 * FLOW, scale=0.1)
    w(f"{f}.final_layer.linear.weight", LATENT, FLOW)
    w(f"{f}.final_layer.linear.bias", LATENT, scale=0.1)
    w(f"{f}.final_layer.adaLN_modulation.1.weight", 2 * FLOW, FLOW)
    w(f"{f}.final_layer.adaLN_modulation.1.bias", 2 * FLOW, scale=0.1)
    # mimi: SEANet encoder and decoder, a transformer on each side, the resamplers
    _seanet(w, "mimi.encoder.model", decoder=False)
    _seanet(w, "mimi.decoder.model", decoder=True)
    for side in ("encoder", "decoder"):
        for i in range(1):
            p = f"mimi.{side}_transformer.transformer.layers.{i}"
            layer(p, MIMI, MIMI_FF)
            ones(f"{p}.layer_scale_1.scale", MIMI, 0.1)
            ones(f"{p}.layer_scale_2.scale", MIMI, 0.1)
    w("mimi.downsample.conv.conv.weight", MIMI, MIMI, 2 * DOWNSAMPLE)
    w("mimi.upsample.convtr.convtr.weight", MIMI, 1, 2 * DOWNSAMPLE, scale=0.2)
    w("mimi.quantizer.output_proj.weight", MIMI, LATENT, 1)

    save_file(t, path / "model.safetensors")
    write_sentencepiece(SentencePieceModel(pieces), path / "tokenizer.model")
    return path


def _seanet(w: Callable[..., None], prefix: str, *, decoder: bool) -> None:
    """SEANet's `model.<i>` convolutions (torch layouts: Conv1d (out, in, k), ConvTranspose1d
    (in, out, k)); the encoder goes 1 -> 4 -> ... -> 32 -> MIMI, the decoder back."""
    last = 3 * len(RATIOS) + 2
    if not decoder:
        w(f"{prefix}.0.conv.conv.weight", SEANET[0], 1, 7)
        w(f"{prefix}.0.conv.conv.bias", SEANET[0], scale=0.01)
        for i, stride in enumerate(RATIOS):
            ch = SEANET[i]
            res = f"{prefix}.{1 + 3 * i}.block"
            w(f"{res}.1.conv.conv.weight", ch // 2, ch, 3)
            w(f"{res}.1.conv.conv.bias", ch // 2, scale=0.01)
            w(f"{res}.3.conv.conv.weight", ch, ch // 2, 1)
            w(f"{res}.3.conv.conv.bias", ch, scale=0.01)
            w(f"{prefix}.{3 + 3 * i}.conv.conv.weight", SEANET[i + 1], ch, 2 * stride)
            w(f"{prefix}.{3 + 3 * i}.conv.conv.bias", SEANET[i + 1], scale=0.01)
        w(f"{prefix}.{last}.conv.conv.weight", MIMI, SEANET[-1], 3)
        w(f"{prefix}.{last}.conv.conv.bias", MIMI, scale=0.01)
        return
    w(f"{prefix}.0.conv.conv.weight", SEANET[-1], MIMI, 7)
    w(f"{prefix}.0.conv.conv.bias", SEANET[-1], scale=0.01)
    for i, stride in enumerate(reversed(RATIOS)):
        ch_in, ch_out = SEANET[-1 - i], SEANET[-2 - i]
        w(f"{prefix}.{2 + 3 * i}.convtr.convtr.weight", ch_in, ch_out, 2 * stride)
        w(f"{prefix}.{2 + 3 * i}.convtr.convtr.bias", ch_out, scale=0.01)
        res = f"{prefix}.{3 + 3 * i}.block"
        w(f"{res}.1.conv.conv.weight", ch_out // 2, ch_out, 3)
        w(f"{res}.1.conv.conv.bias", ch_out // 2, scale=0.01)
        w(f"{res}.3.conv.conv.weight", ch_out, ch_out // 2, 1)
        w(f"{res}.3.conv.conv.bias", ch_out, scale=0.01)
    w(f"{prefix}.{last}.conv.conv.weight", 1, SEANET[0], 7)
    w(f"{prefix}.{last}.conv.conv.bias", 1, scale=0.01)
