"""Decision temperatures: read from a checkpoint's calibration data, written as
`{arch}.decision.temperature.<name>` floats.

Names are `choice` | `score` | `noul`, optionally with a bucket of option counts: `2`, `3_5`,
`6_10`, `11` (lev: `small`, `mid`, `large`). Checkpoints spell buckets their own way
(`choice:3-5`, `choice:11+`, `choice:A:small`); `normalize` maps them.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from llamactl.core.decision_keys import temperature_key
from llamactl.core.errors import CheckpointError

QUESTION_TYPES = ("choice", "score", "noul")
BUCKETS = {
    "2": "2",
    "3-5": "3_5",
    "3_5": "3_5",
    "6-10": "6_10",
    "6_10": "6_10",
    "11+": "11",
    "11": "11",
    "small": "small",
    "mid": "mid",
    "large": "large",
}


def normalize(raw: str, file: Path) -> str:
    """`choice:3-5` -> `choice.3_5`; an unknown spelling is a checkpoint error."""
    qtype, _, bucket = raw.replace(".", ":").partition(":")
    if qtype not in QUESTION_TYPES or (bucket and bucket not in BUCKETS):
        raise CheckpointError(
            file,
            f"temperatures[{raw!r}]",
            "expected choice|score|noul, optionally :2, :3-5, :6-10 or :11+",
        )
    return f"{qtype}.{BUCKETS[bucket]}" if bucket else qtype


def check_value(raw: str, value: Any, file: Path) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= 0
    ):
        raise CheckpointError(
            file, f"temperatures[{raw!r}]", f"a temperature must be a number > 0, got {value!r}"
        )
    return float(value)


def read_temperatures(table: Any, file: Path) -> dict[str, float]:
    """A `{"choice:3-5": 1.4, ...}` table, normalized and checked."""
    if table is None:
        return {}
    if not isinstance(table, dict):
        raise CheckpointError(file, "temperatures", "expected an object of name -> number")
    return {normalize(str(k), file): check_value(str(k), v, file) for k, v in table.items()}


def read_lev_temperatures(table: Any, file: Path) -> dict[str, float]:
    """Lev's `qtype:mode[:band]` names; only mode A (the label readout) is converted."""
    if not isinstance(table, dict):
        raise CheckpointError(file, "temperatures", "expected an object of name -> number")
    out: dict[str, float] = {}
    for raw, value in table.items():
        qtype, mode, *band = str(raw).split(":")
        if mode != "A":
            continue  # mode B is the large-option head, which is not converted
        name = normalize(":".join([qtype, *band]), file)
        out[name] = check_value(str(raw), value, file)
    return out


def write_temperatures(w: Any, arch: str, temperatures: dict[str, float]) -> None:
    for name, value in temperatures.items():
        w.add_float32(temperature_key(arch, name), value)
