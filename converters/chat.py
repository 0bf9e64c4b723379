"""Plain chat checkpoints (Llama, Qwen2, Qwen3, Qwen3.5, LFM2, Gemma 3) in llama.cpp's layouts.

Each family is told by config.json `architectures` and written as llama.cpp's own converter
writes it: Llama's q/k rows permuted back from Hugging Face's rotary layout (and
`rope.dimension_count`, `vocab_size`), Qwen2's q/k/v biases, Qwen3 and Qwen3.5 through the trunk
code the decision families use, LFM2's trunk, and Gemma 3 with its RMSNorm weights stored as
1 + w, `attention.sliding_window` and the local layers' `rope.freq_base_swa` (its sqrt(n_embd)
embedding scale is applied by llama.cpp's graph, not stored). The tokenizer and the
checkpoint's own chat templates go through `vocab.py` unchanged; no decision keys are written.
Qwen3.5's multi-token-prediction block is dropped, as the decision families drop it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gguf
import numpy as np

from llamactl.core.errors import CheckpointError

from . import arch_lfm2, arch_qwen
from .checkpoint import Checkpoint, merged_text_config
from .lazy import Lazy
from .plan import GGUFPlan, OutTensor, OutType
from .textmodel import gguf_name, write_base_hparams, write_general
from .vocab import Vocab, read_bpe_vocab, write_vocab

__all__ = ["CHAT_ARCHITECTURES", "chat_family", "is_chat", "plan_chat"]


@dataclass(frozen=True)
class ChatArch:
    name: str  # the family's name in messages and `--json`
    architectures: tuple[str, ...]


CHAT_ARCHS: tuple[ChatArch, ...] = (
    ChatArch("llama", ("LlamaForCausalLM",)),
    ChatArch("qwen2", ("Qwen2ForCausalLM",)),
    ChatArch("qwen3", arch_qwen.QWEN3_ARCHITECTURES),
    ChatArch("qwen35", arch_qwen.QWEN35_ARCHITECTURES),
    ChatArch("lfm2", ("Lfm2ForCausalLM",)),
    ChatArch("gemma3", ("Gemma3ForCausalLM",)),
)
CHAT_ARCHITECTURES: tuple[str, ...] = tuple(a for c in CHAT_ARCHS for a in c.architectures)


def chat_family(ckpt: Checkpoint) -> str | None:
    """The chat family config.json `architectures` names, or None."""
    if not ckpt.has("config.json"):
        return None
    archs = ckpt.config.get("architectures") or []
    for c in CHAT_ARCHS:
        if any(a in c.architectures for a in archs):
            return c.name
    return None


def is_chat(ckpt: Checkpoint) -> bool:
    return chat_family(ckpt) is not None


def plan_chat(ckpt: Checkpoint, out: OutType) -> GGUFPlan:
    family = chat_family(ckpt)
    if family is None:  # detect() only routes chat checkpoints here
        raise CheckpointError(ckpt.dir / "config.json", "architectures", "not a chat model")
    return _PLANNERS[family](ckpt, out)


# ------------------------------------------------------------------------ shared
def _plan(
    ckpt: Checkpoint,
    family: str,
    arch: str,
    tensors: list[OutTensor],
    vocab: Vocab,
    hparams: Callable[[gguf.GGUFWriter, OutType], None],
) -> GGUFPlan:
    def write_metadata(w: gguf.GGUFWriter, out: OutType) -> None:
        write_general(w, kind="model", card_dir=ckpt.dir)
        hparams(w, out)
        w.add_quantization_version(gguf.GGML_QUANT_VERSION)
        write_vocab(w, vocab, templates=None)

    return GGUFPlan(arch, "model", f"{family} ({arch})", tensors, write_metadata)


def _need(ckpt: Checkpoint, hp: dict[str, Any], *keys: str) -> None:
    for key in keys:
        ckpt.field(hp, key, int)


def _refuse_sentencepiece(ckpt: Checkpoint, family: str) -> None:
    """Only byte-level BPE tokenizers (tokenizer.json) are read, without sentencepiece."""
    if ckpt.has("tokenizer.model") and not ckpt.has("tokenizer.json"):
        raise CheckpointError(
            ckpt.dir / "tokenizer.model",
            None,
            f"{family}: a SentencePiece-only tokenizer is not supported (needs tokenizer.json)",
        )


def _dense_tensors(
    ckpt: Checkpoint,
    arch: gguf.MODEL_ARCH,
    n_layers: int,
    transform: Callable[[str, Lazy], Lazy] | None = None,
) -> list[OutTensor]:
    tmap = gguf.get_tensor_name_map(arch, n_layers)
    arch_name = gguf.MODEL_ARCH_NAMES[arch]
    out: list[OutTensor] = []
    for hf_name in ckpt.tensor_names():
        if hf_name.endswith(".rotary_emb.inv_freq"):
            continue  # llama.cpp computes the rotary frequencies itself
        data = ckpt.lazy(hf_name)
        if transform is not None:
            data = transform(hf_name, data)
        out.append(OutTensor(gguf_name(tmap, hf_name, ckpt, hf_name=hf_name, arch=arch_name), data))
    return out


# ------------------------------------------------------------------------- Llama
def _unpermute(n_head: int) -> Callable[[np.ndarray], np.ndarray]:
    """HF stores q/k rows in rotate-half order; llama.cpp's llama graph wants them interleaved
    (llama.cpp converter's `LlamaModel.permute`)."""

    def f(a: np.ndarray) -> np.ndarray:
        shape = a.shape
        return np.ascontiguousarray(
            a.reshape(n_head, 2, shape[0] // n_head // 2, *shape[1:]).swapaxes(1, 2)
        ).reshape(shape)

    return f


def _plan_llama(ckpt: Checkpoint, out: OutType) -> GGUFPlan:
    _refuse_sentencepiece(ckpt, "llama")
    hp = ckpt.config
    _need(ckpt, hp, "hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
    n_head = hp["num_attention_heads"]
    n_kv = hp.get("num_key_value_heads", n_head)

    def transform(name: str, data: Lazy) -> Lazy:
        if name.endswith(("q_proj.weight", "q_proj.bias")):
            return data.map(_unpermute(n_head))
        if name.endswith(("k_proj.weight", "k_proj.bias")):
            return data.map(_unpermute(n_kv))
        return data

    tensors = _dense_tensors(ckpt, gguf.MODEL_ARCH.LLAMA, hp["num_hidden_layers"], transform)
    vocab = read_bpe_vocab(ckpt, pre="llama-bpe", vocab_size=hp["vocab_size"])

    def hparams(w: gguf.GGUFWriter, o: OutType) -> None:
        write_base_hparams(w, hp, o, block_count=hp["num_hidden_layers"])
        w.add_vocab_size(hp["vocab_size"])
        head_dim = hp.get("head_dim") or hp["hidden_size"] // n_head
        if "head_dim" not in hp:  # transformers' LlamaConfig fills it in; llama.cpp writes it
            w.add_key_length(head_dim)
            w.add_value_length(head_dim)
        w.add_rope_dimension_count(head_dim)

    return _plan(ckpt, "llama", "llama", tensors, vocab, hparams)


# ------------------------------------------------------------------------- Qwen
def _plan_qwen2(ckpt: Checkpoint, out: OutType) -> GGUFPlan:
    hp = ckpt.config
    _need(ckpt, hp, "hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
    tensors = _dense_tensors(ckpt, gguf.MODEL_ARCH.QWEN2, hp["num_hidden_layers"])
    vocab = read_bpe_vocab(ckpt, pre="qwen2", vocab_size=hp["vocab_size"])

    def hparams(w: gguf.GGUFWriter, o: OutType) -> None:
        write_base_hparams(w, hp, o, block_count=hp["num_hidden_layers"])

    return _plan(ckpt, "qwen2", "qwen2", tensors, vocab, hparams)


def _plan_qwen3_or_35(family: str) -> Callable[[Checkpoint, OutType], GGUFPlan]:
    def plan(ckpt: Checkpoint, out: OutType) -> GGUFPlan:
        trunk = arch_qwen.read_trunk(ckpt)
        tensors = arch_qwen.trunk_tensors(ckpt, trunk)
        vocab = read_bpe_vocab(ckpt, pre=trunk.pre, vocab_size=trunk.hp["vocab_size"])

        def hparams(w: gguf.GGUFWriter, o: OutType) -> None:
            arch_qwen.write_hparams(w, trunk, o)

        return _plan(ckpt, family, trunk.arch_name, tensors, vocab, hparams)

    return plan


# ------------------------------------------------------------------------- LFM2
def _plan_lfm2(ckpt: Checkpoint, out: OutType) -> GGUFPlan:
    trunk = arch_lfm2.read_trunk(ckpt)
    tensors = arch_lfm2.trunk_tensors(ckpt, trunk)
    vocab = read_bpe_vocab(ckpt, pre=arch_lfm2.PRE, vocab_size=trunk.hp["vocab_size"])

    def hparams(w: gguf.GGUFWriter, o: OutType) -> None:
        arch_lfm2.write_hparams(w, trunk, o)

    return _plan(ckpt, "lfm2", "lfm2", tensors, vocab, hparams)


# ------------------------------------------------------------------------ Gemma 3
def _plan_gemma3(ckpt: Checkpoint, out: OutType) -> GGUFPlan:
    _refuse_sentencepiece(ckpt, "gemma3")
    hp = merged_text_config(ckpt.config)
    _need(ckpt, hp, "hidden_size", "num_hidden_layers", "intermediate_size", "vocab_size")
    if hp.get("attn_logit_softcapping") is not None:
        raise CheckpointError(
            ckpt.dir / "config.json", "attn_logit_softcapping", "Gemma 3 has none (Gemma 2?)"
        )

    def rename(name: str) -> str | None:
        if name.startswith(("multi_modal_projector.", "vision_tower.", "model.vision_tower.")):
            return None
        return name.replace("language_model.", "")

    n_layers = hp["num_hidden_layers"]
    tok = ckpt.json("tokenizer.json")
    n_real = len((tok.get("model") or {}).get("vocab") or {}) + len(tok.get("added_tokens") or [])
    tmap = gguf.get_tensor_name_map(gguf.MODEL_ARCH.GEMMA3, n_layers)
    tensors: list[OutTensor] = []
    for hf_name in ckpt.tensor_names():
        name = rename(hf_name)
        if name is None:
            continue
        data = ckpt.lazy(hf_name)
        if "embed_tokens.weight" in name and data.shape[0] > n_real:
            data = data.rows(0, n_real)  # llama.cpp drops rows past the tokenizer's tokens
        if name.endswith("norm.weight"):  # Gemma3RMSNorm scales by (1 + w)
            data = data.map(lambda a: a + 1.0)
        tensors.append(OutTensor(gguf_name(tmap, name, ckpt, hf_name=hf_name, arch="gemma3"), data))
    vocab = read_bpe_vocab(ckpt, pre="default", vocab_size=hp["vocab_size"])

    def hparams(w: gguf.GGUFWriter, o: OutType) -> None:
        # the keys (and defaults) of llama.cpp converter's Gemma3Model.set_gguf_parameters
        w.add_context_length(hp.get("max_position_embeddings", 131072))
        w.add_embedding_length(hp["hidden_size"])
        w.add_block_count(n_layers)
        w.add_feed_forward_length(hp["intermediate_size"])
        w.add_head_count(hp.get("num_attention_heads", 8))
        w.add_layer_norm_rms_eps(hp.get("rms_norm_eps", 1e-6))
        w.add_key_length(hp.get("head_dim", 256))
        w.add_value_length(hp.get("head_dim", 256))
        w.add_rope_freq_base(hp.get("rope_theta", 1_000_000.0))
        if (local := hp.get("rope_local_base_freq")) is not None:
            w.add_rope_freq_base_swa(local)  # the sliding-window layers' rotary base
        if softcap := hp.get("final_logit_softcapping"):
            w.add_final_logit_softcapping(softcap)
        if hp.get("sliding_window_pattern") != 1 and hp.get("sliding_window") is not None:
            w.add_sliding_window(hp["sliding_window"])
        w.add_head_count_kv(hp.get("num_key_value_heads", 4))
        scaling = hp.get("rope_scaling") or {}
        if scaling.get("rope_type") == "linear" and "factor" in scaling:
            w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
            w.add_rope_scaling_factor(scaling["factor"])
        w.add_file_type(o.file_type)

    return _plan(ckpt, "gemma3", "gemma3", tensors, vocab, hparams)


_PLANNERS: dict[str, Callable[[Checkpoint, OutType], GGUFPlan]] = {
    "llama": _plan_llama,
    "qwen2": _plan_qwen2,
    "qwen3": _plan_qwen3_or_35("qwen3"),
    "qwen35": _plan_qwen3_or_35("qwen35"),
    "lfm2": _plan_lfm2,
    "gemma3": _plan_gemma3,
}
