"""LiquidAI's d1 decision models.

- `lfm2-d1`: an LFM2 causal LM (usually inside an LFM2-VL checkpoint) detected by
  `auto_map.AutoModel` ending in `.D1Model`; label logits at the last token, so the GGUF is a
  plain `lfm2` model that llama.cpp loads as is. Its LFM2-VL vision tower goes to the mmproj.
  Only the default and `systemone` templates are written (the speech-task templates stay out).
- `lfm2-d1-omni`: `model_type == "d1_omni"`; the LFM2 trunk runs bidirectionally and `head_layers`
  plain transformer blocks (LayerNorm, one fused QKV, a 4x MLP) follow it. Trunk and head
  blocks are written as one stack (`blk.<n_trunk + i>` for head block i, per-layer FFN sizes,
  head KV heads = head count), with the question-type embedding as `token_types` and the option
  scorer as `cls.norm` / `cls` / `cls.output`. BOS is not auto-added (the template writes it
  after the media).
"""

from __future__ import annotations

from typing import Any

import gguf

from llamactl.core.decision_keys import head_block_count_key
from llamactl.core.errors import CheckpointError, ConvertError

from . import arch_lfm2, mmproj
from .checkpoint import Checkpoint
from .decision import (
    calibration_temperatures,
    chat_templates,
    systemone_template,
    write_decision,
)
from .plan import GGUFPlan, OutTensor, OutType
from .textmodel import write_general
from .vocab import read_bpe_vocab, require_single_tokens, write_vocab

D1 = "lfm2-d1"
D1_OMNI = "lfm2-d1-omni"
ARCH = gguf.MODEL_ARCH_NAMES[arch_lfm2.ARCH]
OMNI_LIMITS = {"max_length": 16384, "image_text_length": 896, "audio_text_length": 15360}
# d1-omni head weights (HF name inside `head.head.layers.<i>.`) -> GGUF name inside `blk.<n>.`
OMNI_BLOCK = {
    "norm1": "attn_norm",
    "attn.qkv": "attn_qkv",
    "attn.out": "attn_output",
    "norm2": "ffn_norm",
    "mlp.fc1": "ffn_up",
    "mlp.fc2": "ffn_down",
}
OMNI_SCORER = {
    "head.scorer.norm": "cls.norm",
    "head.scorer.dense": "cls",
    "head.scorer.out": "cls.output",
}
D1_LABELS = [
    *(chr(c) for c in range(ord("A"), ord("Z") + 1)),
    *(str(d) for d in range(10)),
    "yes",
    "no",
]


def is_d1(ckpt: Checkpoint) -> bool:
    auto_map = ckpt.config.get("auto_map")
    model = auto_map.get("AutoModel") if isinstance(auto_map, dict) else None
    return isinstance(model, str) and model.endswith(".D1Model")


def is_d1_omni(ckpt: Checkpoint) -> bool:
    return ckpt.config.get("model_type") == "d1_omni"


def _check_lfm2(ckpt: Checkpoint, claim: str) -> None:
    tc = ckpt.config.get("text_config")
    hp = tc if isinstance(tc, dict) else ckpt.config
    kind = hp.get("model_type")
    if kind is not None and kind != "lfm2":
        field = "text_config.model_type" if isinstance(tc, dict) else "model_type"
        raise CheckpointError(
            ckpt.dir / "config.json",
            field,
            f"{claim} is built on LFM2, but the text model is {kind!r}",
        )


def plan_d1(ckpt: Checkpoint, out: OutType) -> GGUFPlan:
    _check_lfm2(ckpt, "a D1Model (auto_map.AutoModel)")
    trunk = arch_lfm2.read_trunk(ckpt)
    tensors = arch_lfm2.trunk_tensors(ckpt, trunk)
    vocab = read_bpe_vocab(ckpt, pre=arch_lfm2.PRE, vocab_size=trunk.hp["vocab_size"])
    require_single_tokens(vocab, D1_LABELS, ckpt, "d1's label codes")
    systemone = systemone_template(ckpt, vocab, D1)
    temperatures = calibration_temperatures(ckpt)

    def write_metadata(w: gguf.GGUFWriter, out_: OutType) -> None:
        write_general(w, kind="model", card_dir=ckpt.dir)
        arch_lfm2.write_hparams(w, trunk, out_)
        write_decision(w, ARCH, D1, temperatures)
        w.add_quantization_version(gguf.GGML_QUANT_VERSION)
        write_vocab(w, vocab, templates=chat_templates(vocab, systemone, keep_named=False))

    return GGUFPlan(ARCH, "model", f"{D1} ({ARCH})", tensors, write_metadata)


def plan_d1_mmproj(ckpt: Checkpoint, out: OutType) -> GGUFPlan:
    return mmproj.lfm2_vl_plan(ckpt, out, card_dir=ckpt.dir)


# ----------------------------------------------------------------------- d1-omni
def _omni_config(ckpt: Checkpoint) -> dict[str, Any]:
    cfg = ckpt.config
    for key, value in OMNI_LIMITS.items():
        got = ckpt.field(cfg, key, int)
        if got != value:
            raise CheckpointError(
                ckpt.dir / "config.json", key, f"d1-omni is converted for {value}, found {got}"
            )
    ckpt.field(cfg, "head_layers", int)
    if not isinstance(cfg.get("text_config"), dict):
        raise CheckpointError(
            ckpt.dir / "config.json",
            "text_config",
            "missing: d1-omni's LFM2 trunk is described there",
        )
    return cfg


def _omni_rename(name: str) -> str | None:
    if not name.startswith("encoder."):
        return None  # head, vision and audio weights are mapped elsewhere
    return "model." + name[len("encoder.") :]


def plan_d1_omni(ckpt: Checkpoint, out: OutType) -> GGUFPlan:
    cfg = _omni_config(ckpt)
    _check_lfm2(ckpt, "d1-omni")
    trunk = arch_lfm2.read_trunk(ckpt)
    n_head_layers = int(cfg["head_layers"])
    head_ff = int(cfg.get("head_intermediate_size", 4 * trunk.n_embd))
    tensors = arch_lfm2.trunk_tensors(ckpt, trunk, rename=_omni_rename)
    head = _omni_head_tensors(ckpt, trunk.n_layers, n_head_layers)
    tensors += head
    vocab = read_bpe_vocab(ckpt, pre=arch_lfm2.PRE, vocab_size=trunk.hp["vocab_size"])
    for marker in ("<|mask|>", *(f"<|reserved_{i}|>" for i in range(7, 12))):
        if vocab.id_of(marker) is None:
            raise CheckpointError(
                ckpt.dir / "tokenizer.json",
                "added_tokens",
                f"d1-omni's prompt needs the token {marker}",
            )
    systemone = systemone_template(ckpt, vocab, D1_OMNI)
    temperatures = calibration_temperatures(ckpt)
    eps = float(cfg.get("head_layer_norm_eps", 1e-5))

    def write_metadata(w: gguf.GGUFWriter, out_: OutType) -> None:
        write_general(w, kind="model", card_dir=ckpt.dir)
        arch_lfm2.write_hparams(w, trunk, out_, head_layers=n_head_layers, head_ff=head_ff)
        w.add_causal_attention(False)
        w.add_layer_norm_eps(eps)
        write_decision(w, ARCH, D1_OMNI, temperatures)
        w.add_uint32(head_block_count_key(ARCH), n_head_layers)
        w.add_quantization_version(gguf.GGML_QUANT_VERSION)
        write_vocab(
            w, vocab, templates=chat_templates(vocab, systemone, keep_named=False), add_bos=False
        )

    return GGUFPlan(
        ARCH, "model", f"{D1_OMNI} ({ARCH})", tensors, write_metadata, tuple(t.name for t in head)
    )


def _omni_head_tensors(ckpt: Checkpoint, n_trunk: int, n_head_layers: int) -> list[OutTensor]:
    out: list[OutTensor] = []
    seen_blocks: set[int] = set()
    for name in ckpt.tensor_names():
        gguf_name = _omni_head_name(ckpt, name, n_trunk, n_head_layers, seen_blocks)
        if gguf_name is not None:
            out.append(OutTensor(gguf_name, ckpt.lazy(name)))
    if len(seen_blocks) != n_head_layers:
        raise CheckpointError(
            ckpt.dir / "config.json",
            "head_layers",
            f"says {n_head_layers}, the weights hold {len(seen_blocks)} blocks",
        )
    return out


def _omni_head_name(
    ckpt: Checkpoint, name: str, n_trunk: int, n_head_layers: int, seen: set[int]
) -> str | None:
    if name == "head.type_emb.weight":
        return "token_types.weight"
    stem, _, suffix = name.rpartition(".")
    if stem in OMNI_SCORER:
        return f"{OMNI_SCORER[stem]}.{suffix}"
    prefix = "head.head.layers."
    if not name.startswith(prefix):
        if name.startswith("head."):
            raise CheckpointError(
                ckpt.tensor_entries[name].file, name, "unexpected tensor in d1-omni's decision head"
            )
        return None
    index, _, rest = name[len(prefix) :].partition(".")
    part = rest.rpartition(".")[0]
    if not index.isdecimal() or int(index) >= n_head_layers or part not in OMNI_BLOCK:
        raise CheckpointError(
            ckpt.tensor_entries[name].file, name, "unexpected tensor in d1-omni's head blocks"
        )
    seen.add(int(index))
    return f"blk.{n_trunk + int(index)}.{OMNI_BLOCK[part]}.{suffix}"


def plan_d1_omni_mmproj(ckpt: Checkpoint, out: OutType) -> GGUFPlan:
    raise ConvertError(
        "d1-omni's vision and audio towers (projector types d1omni_v / d1omni_a) are not "
        "supported by this converter yet, and the pinned llama.cpp's mtmd cannot load them; "
        "convert the text model without --mmproj"
    )
