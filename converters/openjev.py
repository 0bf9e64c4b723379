"""OpenJev and its variants.

- `openjev`: a full Qwen3.5 (or Qwen3) causal LM; label logits of the letters A-Z, a-z at the
  last token. Detected by upstream's layout (`helper/shim.py` beside config.json), by
  `"decision_type": "openjev"` in config.json or calibration.json, or by "openjev" in the
  checkpoint's name. Without a calibration its helper's temperatures are written.
- `lev`: a LoRA adapter (detected by `lev_release.json`) merged into the Qwen3.5 base given with
  `--base`; temperatures of the label readout ("mode A") from calibration.json.
- `kev`: a LoRA adapter plus a pointer head (`head.pt` with q/k projections, detected with
  `training_config.json` `args.head_dim`), merged into `--base`; the head is written as
  `cls.output` = concat(q, k) and `embedding_length_out` = 2 * head_dim; one temperature.

The base model is never downloaded: `--base` names a local checkpoint directory.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import gguf
import numpy as np

from llamactl.core.errors import CheckpointError, ConvertError

from . import arch_qwen, mmproj, torch_pickle
from .calibration import check_value, read_lev_temperatures
from .checkpoint import Checkpoint
from .decision import calibration_temperatures, chat_templates, systemone_template, write_decision
from .lazy import constant
from .lora import ADAPTER_CONFIG, LoraAdapter, read_adapter
from .plan import GGUFPlan, OutTensor, OutType
from .textmodel import write_general
from .vocab import Vocab, read_bpe_vocab, require_single_tokens, write_vocab

OPENJEV, LEV, KEV = "openjev", "lev", "kev"
CLS_OUT = gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.CLS_OUT]
UPPER = [chr(c) for c in range(ord("A"), ord("Z") + 1)]
LOWER = [chr(c) for c in range(ord("a"), ord("z") + 1)]
OPENJEV_SHIM = "helper/shim.py"
# the temperatures OpenJev's helper/shim.py applies (noul's on top of the others), written
# when the checkpoint has no calibration of its own, as llama.cpp's converter writes them
OPENJEV_TEMPERATURE = 0.85
OPENJEV_TEMPERATURE_NOUL = 1.829074
KEV_MARKERS = ("<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|box_start|>", "<|box_end|>")


# --------------------------------------------------------------------- detection
def is_openjev(ckpt: Checkpoint) -> bool:
    if ckpt.has(ADAPTER_CONFIG) or not ckpt.has("config.json"):
        return False
    if ckpt.has(OPENJEV_SHIM):  # upstream's layout, whatever the directory is called
        return True
    calib = ckpt.optional_json("calibration.json") or {}
    if OPENJEV in (ckpt.config.get("decision_type"), calib.get("decision_type")):
        return True
    names = (ckpt.dir.resolve().name, str(ckpt.config.get("_name_or_path", "")))
    return any(OPENJEV in n.lower() for n in names)


def is_lev(ckpt: Checkpoint) -> bool:
    return ckpt.has("lev_release.json")


def is_kev(ckpt: Checkpoint) -> bool:
    if not all(ckpt.has(n) for n in (ADAPTER_CONFIG, "head.pt", "training_config.json")):
        return False
    args = ckpt.json("training_config.json").get("args")
    return isinstance(args, dict) and "head_dim" in args


# ----------------------------------------------------------------------- openjev
def _qwen_trunk(ckpt: Checkpoint, claim: str) -> arch_qwen.QwenTrunk:
    archs = ckpt.config.get("architectures") or []
    known = arch_qwen.QWEN35_ARCHITECTURES + arch_qwen.QWEN3_ARCHITECTURES
    if not any(a in known for a in archs):
        raise CheckpointError(
            ckpt.dir / "config.json",
            "architectures",
            f"{claim} is a Qwen3.5 or Qwen3 model ({', '.join(known)}), found {archs!r}",
        )
    return arch_qwen.read_trunk(ckpt)


def plan_openjev(ckpt: Checkpoint, out: OutType) -> GGUFPlan:
    trunk = _qwen_trunk(ckpt, "openjev")
    tensors = arch_qwen.trunk_tensors(ckpt, trunk)
    vocab = read_bpe_vocab(ckpt, pre=trunk.pre, vocab_size=trunk.hp["vocab_size"])
    require_single_tokens(vocab, UPPER + LOWER, ckpt, "openjev's option letters")
    return _decision_plan(
        ckpt, trunk, tensors, vocab, OPENJEV, openjev_temperatures(ckpt), card=ckpt.dir
    )


def openjev_temperatures(ckpt: Checkpoint) -> dict[str, float]:
    """A calibration.json (or config.json "temperatures") when there is one, else the
    helper's own values."""
    if ckpt.has("calibration.json") or "temperatures" in ckpt.config:
        return calibration_temperatures(ckpt)
    return {
        "choice": OPENJEV_TEMPERATURE,
        "score": OPENJEV_TEMPERATURE,
        "noul": OPENJEV_TEMPERATURE * OPENJEV_TEMPERATURE_NOUL,
    }


def plan_openjev_mmproj(ckpt: Checkpoint, out: OutType) -> GGUFPlan:
    return mmproj.qwen_vl_plan(ckpt, out, card_dir=ckpt.dir)


# ------------------------------------------------------------------ lev and kev
def _base(base: Path | None, adapter: LoraAdapter, kind: str) -> Checkpoint:
    if base is None:
        named = f" ({adapter.base_model})" if adapter.base_model else ""
        raise ConvertError(
            f"{kind} is a LoRA adapter: pass its base model{named} as a local "
            "checkpoint directory with --base PATH"
        )
    return Checkpoint(base)


def _merged_trunk(
    adapter_ckpt: Checkpoint,
    base: Path | None,
    kind: str,
) -> tuple[Checkpoint, arch_qwen.QwenTrunk, list[OutTensor], Vocab]:
    adapter = read_adapter(adapter_ckpt)
    base_ckpt = _base(base, adapter, kind)
    trunk = _qwen_trunk(base_ckpt, f"{kind}'s base model")
    tensors = arch_qwen.trunk_tensors(base_ckpt, trunk, source=adapter.source(base_ckpt))
    adapter.check_all_merged()
    vocab = read_bpe_vocab(base_ckpt, pre=trunk.pre, vocab_size=trunk.hp["vocab_size"])
    return base_ckpt, trunk, tensors, vocab


def plan_lev(ckpt: Checkpoint, out: OutType, base: Path | None) -> GGUFPlan:
    calib = ckpt.json("calibration.json")
    temperatures = read_lev_temperatures(calib.get("temperatures"), ckpt.dir / "calibration.json")
    base_ckpt, trunk, tensors, vocab = _merged_trunk(ckpt, base, LEV)
    require_single_tokens(vocab, UPPER, base_ckpt, "lev's option letters")
    return _decision_plan(
        ckpt, trunk, tensors, vocab, LEV, temperatures, card=ckpt.dir, template_ckpt=ckpt
    )


def plan_kev(ckpt: Checkpoint, out: OutType, base: Path | None) -> GGUFPlan:
    head_file = ckpt.dir / "head.pt"
    saved = torch_pickle.load(head_file)
    base_ckpt, trunk, tensors, vocab = _merged_trunk(ckpt, base, KEV)
    head_dim, weight, bias, temperature = _kev_head(ckpt, saved, trunk.hp["hidden_size"])
    for marker in KEV_MARKERS:
        if vocab.id_of(marker) is None:
            raise CheckpointError(
                base_ckpt.dir / "tokenizer.json",
                "added_tokens",
                f"kev's prompt needs the token {marker}",
            )
    tensors += [
        OutTensor(f"{CLS_OUT}.weight", constant(weight, f"{head_file.name} q|k.weight")),
        OutTensor(f"{CLS_OUT}.bias", constant(bias, f"{head_file.name} q|k.bias")),
    ]
    temps = {name: temperature for name in ("choice", "score", "noul")}
    return _decision_plan(
        ckpt,
        trunk,
        tensors,
        vocab,
        KEV,
        temps,
        card=ckpt.dir,
        template_ckpt=ckpt,
        n_embd_out=2 * head_dim,
    )


def _kev_head(
    ckpt: Checkpoint,
    saved: object,
    hidden: int,
) -> tuple[int, np.ndarray, np.ndarray, float]:
    file = ckpt.dir / "head.pt"
    if not isinstance(saved, dict) or not isinstance(saved.get("head"), dict):
        raise CheckpointError(file, "head", "expected a dict with the q/k projections")
    head = saved["head"]
    if set(head) != {"q.weight", "q.bias", "k.weight", "k.bias"}:
        raise CheckpointError(
            file, "head", f"expected q.weight, q.bias, k.weight, k.bias; found {sorted(head)}"
        )
    head_dim = saved.get("head_dim")
    if not isinstance(head_dim, int) or head_dim <= 0:
        raise CheckpointError(file, "head_dim", f"expected a positive integer, got {head_dim!r}")
    args = ckpt.json("training_config.json")["args"]
    if args.get("head_dim") != head_dim:
        raise CheckpointError(
            ckpt.dir / "training_config.json",
            "args.head_dim",
            f"is {args.get('head_dim')!r} but head.pt says {head_dim}",
        )
    for part in ("q", "k"):
        w, b = np.asarray(head[f"{part}.weight"]), np.asarray(head[f"{part}.bias"])
        if w.shape != (head_dim, hidden) or b.shape != (head_dim,):
            raise CheckpointError(
                file,
                f"head.{part}.weight",
                f"expected [{head_dim}, {hidden}] and bias [{head_dim}], got "
                f"{list(w.shape)} and {list(b.shape)}",
            )
    temperature = saved.get("temperature")
    if isinstance(temperature, np.ndarray) and temperature.size == 1:
        temperature = float(temperature.reshape(()))
    temperature = check_value("temperature", temperature, file)
    weight = np.concatenate([head["q.weight"], head["k.weight"]]).astype(np.float32)
    bias = np.concatenate([head["q.bias"], head["k.bias"]]).astype(np.float32)
    return head_dim, weight, bias, temperature


# ------------------------------------------------------------------------ shared
def _decision_plan(
    ckpt: Checkpoint,
    trunk: arch_qwen.QwenTrunk,
    tensors: list[OutTensor],
    vocab: Vocab,
    decision_type: str,
    temperatures: dict[str, float],
    *,
    card: Path,
    template_ckpt: Checkpoint | None = None,
    n_embd_out: int | None = None,
    systemone: str | None = None,
    extra: Callable[[gguf.GGUFWriter, str], None] | None = None,
) -> GGUFPlan:
    """`systemone` replaces the template found for the type; `extra` writes more decision
    metadata (h2o-lightning's noul floor)."""
    if systemone is None:
        systemone = systemone_template(template_ckpt or ckpt, vocab, decision_type)
    arch = trunk.arch_name

    def write_metadata(w: gguf.GGUFWriter, out: OutType) -> None:
        write_general(w, kind="model", card_dir=card)
        arch_qwen.write_hparams(w, trunk, out)
        if n_embd_out is not None:
            w.add_embedding_length_out(n_embd_out)
        write_decision(w, arch, decision_type, temperatures)
        if extra is not None:
            extra(w, arch)
        w.add_quantization_version(gguf.GGML_QUANT_VERSION)
        write_vocab(w, vocab, templates=chat_templates(vocab, systemone))

    head = tuple(t.name for t in tensors if t.name.startswith(CLS_OUT))
    return GGUFPlan(arch, "model", f"{decision_type} ({arch})", tensors, write_metadata, head)
