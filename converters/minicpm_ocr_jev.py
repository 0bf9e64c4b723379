"""MiniCPM-OCR-Jev (`openbmb-minicpm-ocr-jev`): a Qwen3.5-VL trunk with a value head that
scores an OCR text against the image it was read from.

The checkpoint declares `MiniCPMOCRForSequenceClassification`; its `score.weight` becomes
`cls.output.weight`, `embedding_length_out` is the number of classes and the class names
(`id2label`) go to `classifier.output_labels`. It has no LM head and none is invented. The task
is fixed, so the whole prompt is the `systemone` template. The mmproj keeps the preprocessor's
image budget (min/max pixels) instead of mtmd's Qwen-VL default.
"""

from __future__ import annotations

import gguf

from llamactl.core.errors import CheckpointError

from . import arch_qwen, mmproj
from .checkpoint import Checkpoint
from .decision import calibration_temperatures, chat_templates, systemone_template, write_decision
from .plan import GGUFPlan, OutTensor, OutType
from .textmodel import write_general
from .vocab import read_bpe_vocab, write_vocab

TYPE = "openbmb-minicpm-ocr-jev"
HF_ARCHITECTURE = "MiniCPMOCRForSequenceClassification"
CLS_OUT = gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.CLS_OUT]


def is_minicpm_ocr_jev(ckpt: Checkpoint) -> bool:
    return HF_ARCHITECTURE in (ckpt.config.get("architectures") or [])


def class_labels(ckpt: Checkpoint, n_classes: int) -> list[str]:
    """Class names in id order from `id2label`; it must name every row of the head."""
    id2label = ckpt.config.get("id2label")
    if not isinstance(id2label, dict) or not id2label:
        raise CheckpointError(
            ckpt.dir / "config.json", "id2label", "missing: the classifier's labels are needed"
        )
    try:
        labels = {int(k): str(v) for k, v in id2label.items()}
    except ValueError:
        raise CheckpointError(
            ckpt.dir / "config.json", "id2label", "keys must be class ids"
        ) from None
    if sorted(labels) != list(range(n_classes)):
        raise CheckpointError(
            ckpt.dir / "config.json",
            "id2label",
            f"names {len(labels)} classes, score.weight has {n_classes}",
        )
    return [labels[i] for i in range(n_classes)]


def plan(ckpt: Checkpoint, out: OutType) -> GGUFPlan:
    tc = ckpt.config.get("text_config")
    kind = (tc if isinstance(tc, dict) else ckpt.config).get("model_type")
    if kind is not None and not str(kind).startswith("qwen3_5"):
        field = "text_config.model_type" if isinstance(tc, dict) else "model_type"
        raise CheckpointError(
            ckpt.dir / "config.json",
            field,
            f"{HF_ARCHITECTURE} is built on Qwen3.5, found {kind!r}",
        )
    trunk = arch_qwen.read_trunk(ckpt)
    if "score.weight" not in ckpt.tensor_entries:
        raise CheckpointError(
            ckpt.dir / "config.json",
            "architectures",
            f"claims {HF_ARCHITECTURE} but the weights have no score.weight",
        )
    score = ckpt.lazy("score.weight")
    if score.ndim != 2 or score.shape[1] != trunk.hp["hidden_size"]:
        raise CheckpointError(
            ckpt.tensor_entries["score.weight"].file,
            "score.weight",
            f"expected [classes, {trunk.hp['hidden_size']}], got {score.shape}",
        )
    labels = class_labels(ckpt, score.shape[0])

    def rename(name: str) -> str | None:
        if name in ("score.weight", "lm_head.weight"):
            return None  # the head is cls.output; there is no LM head to write
        return arch_qwen.default_rename(name)

    tensors = arch_qwen.trunk_tensors(ckpt, trunk, rename=rename)
    tensors.append(OutTensor(f"{CLS_OUT}.weight", score))
    vocab = read_bpe_vocab(ckpt, pre=trunk.pre, vocab_size=trunk.hp["vocab_size"])
    systemone = systemone_template(ckpt, vocab, TYPE)
    temperatures = calibration_temperatures(ckpt)
    arch = trunk.arch_name

    def write_metadata(w: gguf.GGUFWriter, out_: OutType) -> None:
        write_general(w, kind="model", card_dir=ckpt.dir)
        arch_qwen.write_hparams(w, trunk, out_)
        w.add_embedding_length_out(len(labels))
        w.add_classifier_output_labels(labels)
        write_decision(w, arch, TYPE, temperatures)
        w.add_quantization_version(gguf.GGML_QUANT_VERSION)
        write_vocab(w, vocab, templates=chat_templates(vocab, systemone))

    return GGUFPlan(
        arch, "model", f"{TYPE} ({arch})", tensors, write_metadata, (f"{CLS_OUT}.weight",)
    )


def plan_mmproj(ckpt: Checkpoint, out: OutType) -> GGUFPlan:
    return mmproj.qwen_vl_plan(ckpt, out, card_dir=ckpt.dir, keep_image_budget=True)
