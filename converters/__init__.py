"""Hugging Face decision-model checkpoints to GGUF, in llama.cpp's own layout.

`convert(src, outfile, ...)` detects the family (lfm2-d1, lfm2-d1-omni, MiniCPM-OCR-Jev, OpenJev,
lev, kev, h2o-lightning), plans every tensor and key, and writes the file atomically. `heads`
tells which converted files the pinned llama.cpp loads as they are and which tensors form a
head it refuses.
"""

from __future__ import annotations

from llamactl.core.decision_heads import (
    TrunkPlan,
    head_tensors,
    loads_natively,
    trunk_metadata,
    trunk_plan,
)
from llamactl.core.errors import CheckpointError, ConvertError

from .api import ConvertResult, convert, mmproj_outfile, plan
from .families import FAMILIES, detect
from .plan import OutType

__all__ = [
    "FAMILIES",
    "CheckpointError",
    "ConvertError",
    "ConvertResult",
    "OutType",
    "TrunkPlan",
    "convert",
    "detect",
    "head_tensors",
    "loads_natively",
    "mmproj_outfile",
    "plan",
    "trunk_metadata",
    "trunk_plan",
]
