"""`convert()`: a checkpoint directory to a GGUF (or its mmproj), the one entry point the CLI
and tests use."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from llamactl.core.errors import ConvertError

from .checkpoint import Checkpoint
from .families import Family, detect
from .plan import GGUFPlan, OutType
from .writer import TensorRow, WriteResult, tensor_map, write_plan


@dataclass
class ConvertResult:
    decision_type: str | None  # None for a plain chat model
    arch: str
    kind: str  # "model" | "mmproj"
    outfile: Path
    tensors: list[TensorRow]
    head_tensors: list[str]
    written: WriteResult | None = None  # None for a dry run
    notes: list[str] = field(default_factory=list)
    family: str = ""  # the decision type, or the chat family ("llama", "gemma3"...)

    @property
    def loads_natively(self) -> bool:
        """Whether the pinned llama.cpp loads the file as written (no head it refuses)."""
        return not self.head_tensors


def mmproj_outfile(outfile: Path) -> Path:
    """`--mmproj` writes `mmproj-<name>` unless the name already says mmproj (as llama.cpp)."""
    outfile = Path(outfile)
    return outfile if "mmproj" in outfile.name else outfile.with_name(f"mmproj-{outfile.name}")


def plan(
    src: Path | str,
    *,
    outtype: OutType | str = OutType.F16,
    mmproj: bool = False,
    base: Path | str | None = None,
) -> tuple[Family, GGUFPlan]:
    """Detect the family of `src` and plan its model (or mmproj) file."""
    out = OutType(outtype)
    ckpt = Checkpoint(src)
    family = detect(ckpt)
    if base is not None and not family.takes_base:
        raise ConvertError(
            f"--base is for LoRA adapters (lev, kev); {family.name} is a full checkpoint"
        )
    if mmproj:
        if family.mmproj is None:
            raise ConvertError(f"{family.name} has no mmproj")
        return family, family.mmproj(ckpt, out)
    return family, family.plan(ckpt, out, Path(base) if base is not None else None)


def convert(
    src: Path | str,
    outfile: Path | str,
    *,
    outtype: OutType | str = OutType.F16,
    mmproj: bool = False,
    base: Path | str | None = None,
    dry_run: bool = False,
    progress: bool = False,
    console: Console | None = None,
) -> ConvertResult:
    """Convert `src` to `outfile` (atomically); with `dry_run`, only report the tensor map."""
    out = OutType(outtype)
    target = mmproj_outfile(Path(outfile)) if mmproj else Path(outfile)
    if target.is_dir():
        raise ConvertError(f"{target} is a directory; give the output file name")
    if not target.parent.is_dir():
        raise ConvertError(f"the output directory {target.parent} does not exist")
    with _quiet_gguf():
        family, p = plan(src, outtype=out, mmproj=mmproj, base=base)
        head = list(p.head)
        result = ConvertResult(
            family.decision_type if family.decides else None,
            p.arch,
            p.kind,
            target,
            tensor_map(p, out),
            head,
            family=p.label.split(" ")[0],
        )
        if head:
            shown = ", ".join(head[:3]) + (", ..." if len(head) > 3 else "")
            result.notes.append(
                f"{len(head)} head tensor(s) ({shown}) are not loaded by the pinned llama.cpp's "
                f"{p.arch}: llamactl runs this model from a trunk-only copy with the head in numpy"
            )
        if not dry_run:
            result.written = write_plan(p, target, out, progress=progress, console=console)
    return result


@contextlib.contextmanager
def _quiet_gguf() -> Iterator[None]:
    """gguf-py logs its reasoning (merges found, templates set) as warnings; users get our
    errors instead."""
    loggers = [logging.getLogger(n) for n in ("gguf", "metadata")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)
