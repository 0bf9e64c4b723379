"""The decision types llamactl knows, and what each needs from the engine.

One `DecisionType` per `{arch}.decision.type` value: how options are labelled, how the answer
is read out of the model, whether its questions can share a prompt prefix, and the quirks of its
prompt (sorted keys, escaped special tokens). Values follow the spec's per-type detail (5.7).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from llamactl.core.errors import ModelLoadError

# labels: logits of label tokens at the last prompt token
# classifier: a class head on the last token's hidden state (MiniCPM-OCR-Jev)
# pointer: kev's q/k head, q at the last token against k at each option marker
# markers: d1-omni's head blocks over the whole sequence, scored at each option marker
Readout = Literal["labels", "classifier", "pointer", "markers"]
# how label codes are assigned: letters A-Z then a-z; A..Z then AA..ZZ; d1's code pool
LabelScheme = Literal["letters", "letters_doubled", "d1", "none"]
Buckets = Literal["count", "lev"]


@dataclass(frozen=True)
class DecisionType:
    name: str
    readout: Readout
    labels: LabelScheme
    max_options: int
    shares_prompt: bool
    noul_true_first: bool
    causal: bool = True
    sort_keys: bool = False  # lev: the state (and every object) rendered with sorted keys
    escape_special: bool = False  # kev, d1-omni: `<|x|>` in user text becomes `<¦x¦>`
    flatten_text: bool = False  # kev: state and instructions as YAML-like text
    null_state: bool = False  # lfm2-d1, d1-omni: `state: null` is allowed
    choice_variants: int = 1  # lev: a choice is also asked with its options reversed
    noul_scale: int = 0  # lev: noul read over this many labels as a 0..n-1 rating
    buckets: Buckets = "count"
    takes_images: bool = True
    takes_audio: bool = False
    noul_yes_no: bool = False  # noul criteria may say `yes` / `no` for `true` / `false`


TYPES: dict[str, DecisionType] = {
    t.name: t
    for t in (
        DecisionType("openjev", "labels", "letters", 52, shares_prompt=True, noul_true_first=True),
        DecisionType(
            "lev",
            "labels",
            "letters_doubled",
            255,
            shares_prompt=True,
            noul_true_first=False,
            sort_keys=True,
            choice_variants=2,
            noul_scale=9,
            buckets="lev",
        ),
        DecisionType(
            "nimble", "labels", "letters_doubled", 52, shares_prompt=True, noul_true_first=False
        ),
        DecisionType(
            "pplx-decider",
            "labels",
            "letters_doubled",
            255,
            shares_prompt=True,
            noul_true_first=False,
        ),
        # its serving contract (serve_config.json) lists a noul as [true, false], and reads
        # `yes` / `no` descriptions too; answers may carry a noul floor (see answer.py)
        DecisionType(
            "h2o-lightning",
            "labels",
            "letters",
            52,
            shares_prompt=True,
            noul_true_first=True,
            noul_yes_no=True,
        ),
        DecisionType(
            "lfm2-d1",
            "labels",
            "d1",
            255,
            shares_prompt=True,
            noul_true_first=True,
            null_state=True,
        ),
        DecisionType(
            "kev",
            "pointer",
            "none",
            255,
            shares_prompt=True,
            noul_true_first=False,
            escape_special=True,
            flatten_text=True,
            takes_images=False,
        ),
        DecisionType(
            "lfm2-d1-omni",
            "markers",
            "none",
            255,
            shares_prompt=False,
            noul_true_first=False,
            causal=False,
            escape_special=True,
            null_state=True,
            takes_audio=True,
            noul_yes_no=True,
        ),
        DecisionType(
            "openbmb-minicpm-ocr-jev",
            "classifier",
            "none",
            255,
            shares_prompt=True,
            noul_true_first=False,
        ),
    )
}

# Known names this port cannot run, with the reason a user is told.
UNSUPPORTED = {
    "laya": "laya is a ModernBERT encoder read at mask markers; llamactl does not run it yet",
    "clef": (
        "clef needs llama.cpp's per-token decision-order batch field (llama-ext.h), which "
        "llama-cpp-python does not expose"
    ),
    "d1": (
        "this GGUF says decision.type 'd1', the name before the rename; reconvert it "
        "(it is now 'lfm2-d1' or 'lfm2-d1-omni')"
    ),
}


def lookup(name: str) -> DecisionType:
    """The type named in a GGUF, or a load error that says why it cannot be served."""
    if name in TYPES:
        return TYPES[name]
    if name in UNSUPPORTED:
        raise ModelLoadError(f"unsupported decision model: {UNSUPPORTED[name]}")
    known = ", ".join(sorted(TYPES))
    raise ModelLoadError(f"unknown decision type {name!r}; llamactl serves {known}")
