"""Opening a decision GGUF: its type, temperatures, `systemone` template, label codes, and the
llama.cpp model to run (the file itself, or its trunk-only copy plus a numpy head)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from llamactl.core.decision_heads import trunk_plan
from llamactl.core.decision_keys import (
    BARE_TYPE_KEY,
    TEMPERATURE_INFIX,
    head_block_count_key,
    noul_floor_key,
    type_key,
)
from llamactl.core.errors import ModelLoadError
from llamactl.core.gguf_info import GGUFInfo, read_gguf_info
from llamactl.engine.model import Model

from ..projector import Projector
from .heads import ClassifierHead, OmniHead, PointerHead
from .labels import LabelMaker
from .prompt import OMNI_MAX_TOKENS, TaskBuilder, Vocab
from .registry import DecisionType, lookup
from .render import PromptRenderer
from .tensors import read_tensors
from .trunk import ProgressFactory, TrunkCopy, ensure_trunk

log = logging.getLogger("llamactl.decision")

Head = ClassifierHead | PointerHead | OmniHead


def decision_type_of(info: GGUFInfo) -> str | None:
    """`{arch}.decision.type` (or the bare `decision.type` of early files), if any."""
    arch, bare = info.architecture, info.get(BARE_TYPE_KEY)
    value = bare if arch is None else info.get(type_key(arch), bare)
    return value if isinstance(value, str) else None


def find_mmproj(path: Path) -> Path | None:
    """`mmproj-<name>.gguf` beside the model, as `llamactl convert --mmproj` writes it."""
    candidate = path.with_name(f"mmproj-{path.name}")
    return candidate if candidate.is_file() else None


@dataclass
class DecisionModel:
    path: Path  # the decision GGUF as given
    info: GGUFInfo
    dtype: DecisionType
    model: Model  # what llama.cpp runs: the file, or its trunk-only copy
    temperatures: dict[str, float]
    builder: TaskBuilder
    head: Head | None = None
    trunk: TrunkCopy | None = None
    projector: Projector | None = None
    class_labels: tuple[str, ...] = ()
    noul_floor: float = 0.0  # h2o-lightning: `{arch}.decision.noul_floor`; 0 is off
    notes: list[str] = field(default_factory=list)

    @property
    def max_options(self) -> int:
        return self.builder.labels.max_options

    def close(self, *, keep_model: bool = False) -> None:
        """Free the projector, then (unless kept for its owner to free) the model."""
        if self.projector is not None:
            self.projector.close()
            self.projector = None
        if not keep_model:
            self.model.close()


def load_decision_model(
    path: str | Path,
    *,
    mmproj: Path | None = None,
    n_threads: int = 2,
    progress: ProgressFactory | None = None,
) -> DecisionModel:
    """Load `path` as a decision model; `mmproj` pairs a vision projector with it, `progress`
    shows the making of a trunk-only copy (front ends pass a terminal bar)."""
    path = Path(path)
    info = read_gguf_info(path)
    name = decision_type_of(info)
    if name is None:
        raise ModelLoadError(f"{path.name} is not a decision model (no decision.type)")
    dtype = lookup(name)
    arch = info.architecture or ""
    temperatures = read_temperatures(info)
    noul_floor = read_noul_floor(info)
    template = info.get("tokenizer.chat_template.systemone")
    if not isinstance(template, str) or not template:
        raise ModelLoadError('decision model has no "systemone" template')
    trunk = _trunk_for(info, dtype, progress) if dtype.readout != "labels" else None
    model = Model(trunk.path if trunk else path)
    try:
        dm = _assemble(path, info, dtype, arch, model, trunk, temperatures, template)
        dm.noul_floor = noul_floor
        if mmproj is not None:
            dm.projector = Projector(mmproj, model.handle, n_threads)
    except BaseException:
        model.close()
        raise
    if trunk is not None:
        verb = "made" if trunk.made else "reused"
        dm.notes.append(
            f"{verb} a trunk-only copy ({trunk.nbytes / 2**20:.1f} MiB, without "
            f"{len(trunk.dropped)} head tensors) at {trunk.path}; the head runs in numpy"
        )
    return dm


def read_temperatures(info: GGUFInfo) -> dict[str, float]:
    prefix = f"{info.architecture}{TEMPERATURE_INFIX}"
    out: dict[str, float] = {}
    for key, value in info.metadata.items():
        if not key.startswith(prefix):
            continue
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
            raise ModelLoadError(f"{key} must be a number > 0, got {value!r}")
        out[key[len(prefix) :]] = float(value)
    return out


def read_noul_floor(info: GGUFInfo) -> float:
    """`{arch}.decision.noul_floor`: absent or 0 is off, else in (0.5, 1)."""
    if info.architecture is None:
        return 0.0
    key = noul_floor_key(info.architecture)
    value = info.get(key)
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ModelLoadError(f"{key} must be a number, got {value!r}")
    if value and not 0.5 < value < 1.0:
        raise ModelLoadError(f"{key} must be in (0.5, 1), or 0 (off); got {value!r}")
    return float(value)


def _trunk_for(info: GGUFInfo, dtype: DecisionType, progress: ProgressFactory | None) -> TrunkCopy:
    plan = trunk_plan(dtype.name, [t.name for t in info.tensors], info.metadata)
    if not plan.head:
        raise ModelLoadError(f"{info.path.name} ({dtype.name}) holds no head tensors")
    return ensure_trunk(info, plan, progress=progress)


def _assemble(
    path: Path,
    info: GGUFInfo,
    dtype: DecisionType,
    arch: str,
    model: Model,
    trunk: TrunkCopy | None,
    temperatures: dict[str, float],
    template: str,
) -> DecisionModel:
    def single(text: str) -> int | None:
        ids = model.tokenize(text, add_special=False, parse_special=False)
        return ids[0] if len(ids) == 1 else None

    def special(text: str) -> int | None:
        ids = model.tokenize(text, add_special=False, parse_special=True)
        return ids[0] if len(ids) == 1 else None

    labels = LabelMaker(dtype.labels, single, dtype.max_options)
    if dtype.labels == "d1" and (single("yes") is None or single("no") is None):
        raise ModelLoadError("lfm2-d1 needs 'yes' and 'no' to be single tokens")
    head, class_labels = _head(info, dtype, arch, trunk)
    if class_labels:
        labels.max_options = len(class_labels)
    renderer = PromptRenderer(
        template,
        dtype,
        media_marker="<__media__>",
        bos_token=model.info.bos_token,
        eos_token=model.info.eos_token,
    )
    vocab = Vocab(
        lambda text: model.tokenize(text, add_special=False, parse_special=True),
        box_end=special("<|box_end|>"),
        mask=special("<|mask|>"),
    )
    if dtype.readout == "pointer" and vocab.box_end is None:
        raise ModelLoadError("kev needs <|box_end|> to be one token")
    if dtype.readout == "markers" and vocab.mask is None:
        raise ModelLoadError("lfm2-d1-omni needs <|mask|> to be one token")
    builder = TaskBuilder(
        dtype, renderer, labels, vocab, class_labels=class_labels, max_tokens=OMNI_MAX_TOKENS
    )
    return DecisionModel(
        path, info, dtype, model, temperatures, builder, head, trunk, class_labels=class_labels
    )


def _head(
    info: GGUFInfo, dtype: DecisionType, arch: str, trunk: TrunkCopy | None
) -> tuple[Head | None, tuple[str, ...]]:
    if dtype.readout == "labels":
        return None, ()
    assert trunk is not None
    t = read_tensors(info, list(trunk.dropped))
    if dtype.readout == "classifier":
        weight = t["cls.output.weight"]
        raw = info.get(f"{arch}.classifier.output_labels")
        labels = tuple(str(x) for x in raw) if raw else tuple(str(i) for i in range(len(weight)))
        if len(labels) != len(weight):
            raise ModelLoadError(
                f"{arch}.classifier.output_labels names {len(labels)} classes, "
                f"cls.output has {len(weight)}"
            )
        return ClassifierHead(weight, t.get("cls.output.bias")), labels
    if dtype.readout == "pointer":
        return PointerHead(t["cls.output.weight"], t["cls.output.bias"]), ()
    n_blocks = int(info.get(head_block_count_key(arch), 0))
    n_trunk = int(info.get(f"{arch}.block_count", 0)) - n_blocks
    heads = info.get(f"{arch}.attention.head_count")
    n_head = int(heads[n_trunk] if isinstance(heads, list) else heads)
    eps = float(info.get(f"{arch}.attention.layer_norm_epsilon", 1e-5))
    return OmniHead.from_tensors(t, n_trunk, n_blocks, n_head, eps), ()
