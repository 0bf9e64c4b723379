"""H2O-Lightning: a Qwen3.5 causal LM read as one label token at the answer slot.

Detected by its `serve_config.json` (the serving contract H2O ships with the weights: the
system prompt, the "plain" layout, compact JSON states, the "Answer:" prefill, the default
instructions, the option labels, one temperature for every question type and the noul floor).
The converter bakes the prompt into the `systemone` template and writes the temperature as
`decision.temperature.{choice,score,noul}` and the floor as `{arch}.decision.noul_floor`.
"""

from __future__ import annotations

import math
from typing import Any

import gguf

from llamactl.core.decision_keys import noul_floor_key
from llamactl.core.errors import CheckpointError

from . import arch_qwen, templates
from .checkpoint import Checkpoint
from .openjev import LOWER, UPPER, _decision_plan, _qwen_trunk
from .plan import GGUFPlan, OutType
from .vocab import read_bpe_vocab, require_single_tokens

TYPE = "h2o-lightning"
SERVE_CONFIG = "serve_config.json"


def is_h2o_lightning(ckpt: Checkpoint) -> bool:
    if not ckpt.has(SERVE_CONFIG) or not ckpt.has("config.json"):
        return False
    cfg = ckpt.json(SERVE_CONFIG)
    return isinstance(cfg, dict) and "noul_floor" in cfg and "labels" in cfg


def read_serve_config(ckpt: Checkpoint) -> dict[str, Any]:
    """The checked contract: temperature, noul_floor, labels and the prompt settings."""
    file = ckpt.dir / SERVE_CONFIG
    cfg = ckpt.json(SERVE_CONFIG)

    def number(key: str) -> float:
        value = cfg.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise CheckpointError(file, key, f"expected a number, got {value!r}")
        if not math.isfinite(value):
            raise CheckpointError(file, key, f"expected a finite number, got {value!r}")
        return float(value)

    temperature = number("temperature")
    if not 0.05 <= temperature <= 20.0:
        raise CheckpointError(file, "temperature", f"{temperature} is outside [0.05, 20]")
    floor = number("noul_floor")
    if floor and not 0.5 < floor < 1.0:
        raise CheckpointError(file, "noul_floor", f"{floor} must be in (0.5, 1), or 0 (off)")
    labels = cfg.get("labels")
    letters = UPPER + LOWER
    if not isinstance(labels, list) or not labels:
        raise CheckpointError(file, "labels", "expected the list of option labels, in order")
    labels = [str(x) for x in labels][: int(cfg.get("max_options", len(labels)))]
    if labels != letters[: len(labels)]:
        raise CheckpointError(
            file, "labels", f"expected the letters A, B, C... in order (at most 52), got {labels}"
        )
    prompt = cfg.get("prompt")
    if not isinstance(prompt, dict):
        raise CheckpointError(file, "prompt", "expected an object with the prompt settings")
    if prompt.get("enable_thinking", False):
        raise CheckpointError(
            file, "prompt.enable_thinking", "must be false: the answer follows a closed think block"
        )
    if not prompt.get("chat_template", True):
        raise CheckpointError(file, "prompt.chat_template", "only the chat layout is supported")
    layout = prompt.get("layout", "plain")
    if layout not in ("plain", "markdown"):
        raise CheckpointError(file, "prompt.layout", f"{layout!r} is not plain or markdown")
    return {
        "temperature": temperature,
        "noul_floor": floor,
        "labels": labels,
        "system": prompt.get("system") or None,
        "layout": layout,
        "state_compact": bool(prompt.get("state_compact", True)),
        "prefill": str(prompt.get("prefill", "Answer:")),
        "default_instructions": str(
            prompt.get("default_instructions", "Answer the question below.")
        ),
    }


def plan(ckpt: Checkpoint, out: OutType) -> GGUFPlan:
    contract = read_serve_config(ckpt)
    trunk = _qwen_trunk(ckpt, TYPE)
    tensors = arch_qwen.trunk_tensors(ckpt, trunk)
    vocab = read_bpe_vocab(ckpt, pre=trunk.pre, vocab_size=trunk.hp["vocab_size"])
    require_single_tokens(vocab, contract["labels"], ckpt, "h2o-lightning's option labels")
    systemone = templates.h2o_lightning(
        system=contract["system"],
        layout=contract["layout"],
        state_compact=contract["state_compact"],
        prefill=contract["prefill"],
        default_instructions=contract["default_instructions"],
    )
    temps = {name: contract["temperature"] for name in ("choice", "score", "noul")}
    floor = contract["noul_floor"]

    def extra(w: gguf.GGUFWriter, arch: str) -> None:
        if floor:
            w.add_float32(noul_floor_key(arch), floor)

    return _decision_plan(
        ckpt, trunk, tensors, vocab, TYPE, temps, card=ckpt.dir, systemone=systemone, extra=extra
    )
