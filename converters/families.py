"""Which family a checkpoint is (a decision model, else a plain chat model by its
`architectures`), and how each one is planned."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from llamactl.core.errors import CheckpointError, ConvertError

from . import chat, d1, h2o_lightning, minicpm_ocr_jev, openjev, pockettts
from .checkpoint import Checkpoint
from .plan import GGUFPlan, OutType


@dataclass(frozen=True)
class Family:
    decision_type: str
    detect: Callable[[Checkpoint], bool]
    plan: Callable[[Checkpoint, OutType, Path | None], GGUFPlan]
    mmproj: Callable[[Checkpoint, OutType], GGUFPlan] | None
    takes_base: bool = False
    chat: bool = False  # a plain chat model: no decision keys
    speech: bool = False  # a text-to-speech model: no decision keys either

    @property
    def name(self) -> str:
        """The family as messages name it (the decision type, the speech model, or "chat")."""
        return "chat" if self.chat else self.decision_type

    @property
    def decides(self) -> bool:
        return not (self.chat or self.speech)


def _no_mmproj(kind: str) -> Callable[[Checkpoint, OutType], GGUFPlan]:
    def refuse(ckpt: Checkpoint, out: OutType) -> GGUFPlan:
        raise ConvertError(f"{kind} takes text only: it has no vision tower for --mmproj")

    return refuse


# Most specific first: adapters before full checkpoints, omni before plain d1.
FAMILIES: tuple[Family, ...] = (
    Family(
        pockettts.TYPE,
        pockettts.is_pockettts,
        lambda c, o, b: pockettts.plan(c, o),
        pockettts.plan_mmproj,
        speech=True,
    ),
    Family(openjev.LEV, openjev.is_lev, openjev.plan_lev, _no_mmproj("lev"), takes_base=True),
    Family(openjev.KEV, openjev.is_kev, openjev.plan_kev, _no_mmproj("kev"), takes_base=True),
    Family(
        d1.D1_OMNI, d1.is_d1_omni, lambda c, o, b: d1.plan_d1_omni(c, o), d1.plan_d1_omni_mmproj
    ),
    Family(d1.D1, d1.is_d1, lambda c, o, b: d1.plan_d1(c, o), d1.plan_d1_mmproj),
    Family(
        minicpm_ocr_jev.TYPE,
        minicpm_ocr_jev.is_minicpm_ocr_jev,
        lambda c, o, b: minicpm_ocr_jev.plan(c, o),
        minicpm_ocr_jev.plan_mmproj,
    ),
    Family(
        h2o_lightning.TYPE,
        h2o_lightning.is_h2o_lightning,
        lambda c, o, b: h2o_lightning.plan(c, o),
        _no_mmproj("h2o-lightning"),
    ),
    Family(
        openjev.OPENJEV,
        openjev.is_openjev,
        lambda c, o, b: openjev.plan_openjev(c, o),
        openjev.plan_openjev_mmproj,
    ),
)


# After every decision family: those are chat architectures too, told apart by their files.
CHAT = Family(
    "chat",
    chat.is_chat,
    lambda c, o, b: chat.plan_chat(c, o),
    _no_mmproj("a chat checkpoint (llamactl converts its text model)"),
    chat=True,
)


def detect(ckpt: Checkpoint) -> Family:
    """The family of the checkpoint in `ckpt`, from its files and config.json."""
    for family in (*FAMILIES, CHAT):
        if family.detect(ckpt):
            return family
    if not ckpt.has("config.json"):
        raise CheckpointError(
            ckpt.dir / "config.json",
            None,
            "file not found: not a Hugging Face checkpoint, nor a lev/kev "
            "adapter (lev_release.json / head.pt)",
        )
    cfg = ckpt.config
    found = f"architectures {cfg.get('architectures')!r}, model_type {cfg.get('model_type')!r}"
    raise ConvertError(
        f"{ckpt.dir} is not a checkpoint llamactl can convert ({found}); supported chat "
        "architectures: "
        + ", ".join(chat.CHAT_ARCHITECTURES)
        + "; decision families: "
        + ", ".join(f.decision_type for f in FAMILIES)
    )
