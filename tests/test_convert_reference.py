"""The converted GGUFs compute what the Hugging Face models compute.

Loading proves the layout's names and shapes; this proves the numbers: a plain numpy forward
pass of each synthetic checkpoint, written from the models' published definitions (LFM2,
Qwen3.5 with its gated delta-net, Qwen3), against the log-probabilities the pinned llama.cpp
computes from the converted F32 file through the engine. A wrong permutation (the value-head
reorder of Qwen3.5), a missing `1 + w` or `-exp(A_log)` would move them far apart.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from llamactl.converters import convert
from llamactl.converters.checkpoint import Checkpoint, merged_text_config
from synthetic_checkpoints import cached

from llamactl.engine.engine import Engine, EngineConfig, GenerationRequest
from llamactl.engine.model import Model
from llamactl.engine.types import SamplingParams, TextDelta

PROMPT = "<|im_start|>user\nIs A or B right? yes No 42<|im_end|>\n<|im_start|>assistant\n"
TOP = 8


# ------------------------------------------------------------------ numpy models
def rms_norm(x: np.ndarray, w: np.ndarray, eps: float, *, offset: float = 0.0) -> np.ndarray:
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * (offset + w)


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def rope(x: np.ndarray, theta: float, n_rot: int) -> np.ndarray:
    """NeoX-style (rotate half) rotary embedding on the first `n_rot` dims; x: [T, H, D]."""
    t = x.shape[0]
    inv = theta ** (-np.arange(0, n_rot, 2, dtype=np.float64) / n_rot)
    ang = np.arange(t)[:, None] * inv[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    rot, rest = x[..., :n_rot], x[..., n_rot:]
    a, b = rot[..., : n_rot // 2], rot[..., n_rot // 2 :]
    turned = np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)
    return np.concatenate([turned, rest], axis=-1)


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Causal GQA; q [T, Hq, D], k/v [T, Hkv, D] -> [T, Hq*D]."""
    t, hq, d = q.shape
    rep = hq // k.shape[1]
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    scores = np.einsum("thd,shd->hts", q, k) / np.sqrt(d)
    scores = scores + np.triu(np.full((t, t), -np.inf), 1)[None]
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    return np.einsum("hts,shd->thd", probs, v).reshape(t, hq * d)


def causal_conv(x: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    """Depthwise causal convolution; x [T, C], kernel [C, K]."""
    k = kernel.shape[1]
    padded = np.concatenate([np.zeros((k - 1, x.shape[1])), x])
    return np.stack([(padded[i : i + k] * kernel.T).sum(0) for i in range(x.shape[0])])


def lfm2_forward(w: dict[str, np.ndarray], hp: dict[str, Any], ids: list[int]) -> np.ndarray:
    p, eps = "model.language_model.", hp["norm_eps"]
    n_head, n_kv = hp["num_attention_heads"], hp["num_key_value_heads"]
    hd = hp["hidden_size"] // n_head
    x = w[p + "embed_tokens.weight"][ids]
    for i, kind in enumerate(hp["layer_types"]):
        q = f"{p}layers.{i}."
        h = rms_norm(x, w[q + "operator_norm.weight"], eps)
        if kind == "conv":
            b, c, xx = np.split(h @ w[q + "conv.in_proj.weight"].T, 3, axis=-1)
            conv = causal_conv(b * xx, w[q + "conv.conv.weight"][:, 0, :])
            out = (c * conv) @ w[q + "conv.out_proj.weight"].T
        else:
            t = len(ids)
            qs = (h @ w[q + "self_attn.q_proj.weight"].T).reshape(t, n_head, hd)
            ks = (h @ w[q + "self_attn.k_proj.weight"].T).reshape(t, n_kv, hd)
            vs = (h @ w[q + "self_attn.v_proj.weight"].T).reshape(t, n_kv, hd)
            qs = rope(
                rms_norm(qs, w[q + "self_attn.q_layernorm.weight"], eps), hp["rope_theta"], hd
            )
            ks = rope(
                rms_norm(ks, w[q + "self_attn.k_layernorm.weight"], eps), hp["rope_theta"], hd
            )
            out = attention(qs, ks, vs) @ w[q + "self_attn.out_proj.weight"].T
        x = x + out
        h = rms_norm(x, w[q + "ffn_norm.weight"], eps)
        gate, up = h @ w[q + "feed_forward.w1.weight"].T, h @ w[q + "feed_forward.w3.weight"].T
        x = x + (silu(gate) * up) @ w[q + "feed_forward.w2.weight"].T
    x = rms_norm(x, w[p + "embedding_norm.weight"], eps)
    return x[-1] @ w[p + "embed_tokens.weight"].T


def gated_delta_net(w: dict[str, np.ndarray], q: str, h: np.ndarray, hp: dict[str, Any]):
    nk, nv = hp["linear_num_key_heads"], hp["linear_num_value_heads"]
    dk, dv = hp["linear_key_head_dim"], hp["linear_value_head_dim"]
    t = h.shape[0]
    mixed = silu(causal_conv(h @ w[q + "in_proj_qkv.weight"].T, w[q + "conv1d.weight"][:, 0, :]))
    qs = mixed[:, : nk * dk].reshape(t, nk, dk)
    ks = mixed[:, nk * dk : 2 * nk * dk].reshape(t, nk, dk)
    vs = mixed[:, 2 * nk * dk :].reshape(t, nv, dv)
    z = (h @ w[q + "in_proj_z.weight"].T).reshape(t, nv, dv)
    beta = 1.0 / (1.0 + np.exp(-(h @ w[q + "in_proj_b.weight"].T)))
    a = h @ w[q + "in_proj_a.weight"].T
    g = -np.exp(w[q + "A_log"]) * np.log1p(np.exp(a + w[q + "dt_bias"]))
    qs = np.repeat(qs, nv // nk, axis=1)  # value head j reads key head j // (nv / nk)
    ks = np.repeat(ks, nv // nk, axis=1)
    qs = qs / np.sqrt((qs * qs).sum(-1, keepdims=True) + 1e-6) / np.sqrt(dk)
    ks = ks / np.sqrt((ks * ks).sum(-1, keepdims=True) + 1e-6)
    state = np.zeros((nv, dk, dv))
    out = np.zeros((t, nv, dv))
    for i in range(t):
        state = state * np.exp(g[i])[:, None, None]
        memory = np.einsum("hkv,hk->hv", state, ks[i])
        delta = (vs[i] - memory) * beta[i][:, None]
        state = state + ks[i][:, :, None] * delta[:, None, :]
        out[i] = np.einsum("hkv,hk->hv", state, qs[i])
    out = rms_norm(out, w[q + "norm.weight"], hp["rms_norm_eps"]) * silu(z)
    return out.reshape(t, nv * dv) @ w[q + "out_proj.weight"].T


def qwen35_forward(w: dict[str, np.ndarray], hp: dict[str, Any], ids: list[int]) -> np.ndarray:
    p, eps, hd = "model.language_model.", hp["rms_norm_eps"], hp["head_dim"]
    n_head, n_kv, t = hp["num_attention_heads"], hp["num_key_value_heads"], len(ids)
    rp = hp["rope_parameters"]
    n_rot = int(hd * rp["partial_rotary_factor"])
    x = w[p + "embed_tokens.weight"][ids]
    for i, kind in enumerate(hp["layer_types"]):
        q = f"{p}layers.{i}."
        h = rms_norm(x, w[q + "input_layernorm.weight"], eps, offset=1.0)
        if kind == "linear_attention":
            out = gated_delta_net(w, q + "linear_attn.", h, hp)
        else:
            s = q + "self_attn."
            both = (h @ w[s + "q_proj.weight"].T).reshape(t, n_head, 2 * hd)
            qs, gate = both[..., :hd], both[..., hd:].reshape(t, n_head * hd)
            ks = (h @ w[s + "k_proj.weight"].T).reshape(t, n_kv, hd)
            vs = (h @ w[s + "v_proj.weight"].T).reshape(t, n_kv, hd)
            qs = rope(
                rms_norm(qs, w[s + "q_norm.weight"], eps, offset=1.0), rp["rope_theta"], n_rot
            )
            ks = rope(
                rms_norm(ks, w[s + "k_norm.weight"], eps, offset=1.0), rp["rope_theta"], n_rot
            )
            attn = attention(qs, ks, vs) * (1.0 / (1.0 + np.exp(-gate)))
            out = attn @ w[s + "o_proj.weight"].T
        x = x + out
        h = rms_norm(x, w[q + "post_attention_layernorm.weight"], eps, offset=1.0)
        mlp = silu(h @ w[q + "mlp.gate_proj.weight"].T) * (h @ w[q + "mlp.up_proj.weight"].T)
        x = x + mlp @ w[q + "mlp.down_proj.weight"].T
    x = rms_norm(x, w[p + "norm.weight"], eps, offset=1.0)
    return x[-1] @ w["lm_head.weight"].T


def qwen3_forward(w: dict[str, np.ndarray], hp: dict[str, Any], ids: list[int]) -> np.ndarray:
    eps, hd, t = hp["rms_norm_eps"], hp["head_dim"], len(ids)
    n_head, n_kv = hp["num_attention_heads"], hp["num_key_value_heads"]
    x = w["model.embed_tokens.weight"][ids]
    for i in range(hp["num_hidden_layers"]):
        s = f"model.layers.{i}."
        h = rms_norm(x, w[s + "input_layernorm.weight"], eps)
        qs = (h @ w[s + "self_attn.q_proj.weight"].T).reshape(t, n_head, hd)
        ks = (h @ w[s + "self_attn.k_proj.weight"].T).reshape(t, n_kv, hd)
        vs = (h @ w[s + "self_attn.v_proj.weight"].T).reshape(t, n_kv, hd)
        qs = rope(rms_norm(qs, w[s + "self_attn.q_norm.weight"], eps), hp["rope_theta"], hd)
        ks = rope(rms_norm(ks, w[s + "self_attn.k_norm.weight"], eps), hp["rope_theta"], hd)
        x = x + attention(qs, ks, vs) @ w[s + "self_attn.o_proj.weight"].T
        h = rms_norm(x, w[s + "post_attention_layernorm.weight"], eps)
        mlp = silu(h @ w[s + "mlp.gate_proj.weight"].T) * (h @ w[s + "mlp.up_proj.weight"].T)
        x = x + mlp @ w[s + "mlp.down_proj.weight"].T
    x = rms_norm(x, w["model.norm.weight"], eps)
    return x[-1] @ w["model.embed_tokens.weight"].T


# ------------------------------------------------------------------------ checks
def log_softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max()
    return z - np.log(np.exp(z).sum())


def engine_top_logprobs(path: Path) -> tuple[list[int], list[tuple[int, float]]]:
    """The prompt's ids and llama.cpp's top log-probabilities after it (via the engine)."""
    model = Model(path)
    ids = model.tokenize(PROMPT, add_special=False)
    greedy = SamplingParams(temperature=0.0)
    # f16 KV: bf16 (the serving default, chosen for batch-shape exactness) keeps 8 mantissa
    # bits, which alone moves log-probs by ~1e-3; this test checks the converter, not the KV
    config = EngineConfig(n_parallel=1, n_ctx=256, n_batch=64, kv_type="f16")
    with Engine(model, config) as engine:
        stream = engine.submit(GenerationRequest(ids, greedy, max_tokens=1, logprobs=TOP))
        events = [e for e in stream if isinstance(e, TextDelta) and e.logprobs]
    model.close()
    _, top = events[0].logprobs[0]
    return ids, [(t.token, t.logprob) for t in top]


def check_against(path: Path, forward, ckpt_dir: Path) -> None:
    ckpt = Checkpoint(ckpt_dir)
    weights = {n: ckpt.lazy(n)().astype(np.float64) for n in ckpt.tensor_names()}
    hp = merged_text_config(ckpt.config)
    ids, top = engine_top_logprobs(path)
    ref = log_softmax(forward(weights, hp, ids))
    assert np.isfinite(ref).all()
    assert top[0][0] == int(np.argmax(ref))
    # f16 KV rounding plus the CPU's kernels (AVX2 and AVX-512 accumulate in different
    # orders): up to 5.2e-4 measured on an AVX2-only machine; a converter mistake (a tensor
    # transposed, a norm offset missed) moves log-probs by 1e-2 and more
    for token, logprob in top:
        assert abs(ref[token] - logprob) < 1e-3, (token, ref[token], logprob)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("family", "forward"),
    [("lfm2-d1", lfm2_forward), ("openjev", qwen35_forward), ("openjev-qwen3", qwen3_forward)],
)
def test_llama_cpp_matches_the_reference_forward(family, forward, tmp_path_factory):
    src = cached(tmp_path_factory, family)
    out = tmp_path_factory.mktemp("ref") / f"{family}.gguf"
    convert(src, out, outtype="f32")
    check_against(out, forward, src)
