"""What every decision GGUF carries on top of its trunk: `{arch}.decision.type`, the
temperatures, and the chat templates with the named `systemone` one."""

from __future__ import annotations

import gguf

from llamactl.core.decision_keys import type_key

from . import templates
from .calibration import read_temperatures, write_temperatures
from .checkpoint import Checkpoint
from .vocab import Vocab, named_templates

SYSTEMONE = "systemone"
TEMPLATE_FILES = (
    "systemone.jinja",
    "chat_template.systemone.jinja",
    "additional_chat_templates/systemone.jinja",
)


def systemone_template(ckpt: Checkpoint, vocab: Vocab, decision_type: str) -> str:
    """The checkpoint's own `systemone` template when it has one, else ours for the type."""
    for name in TEMPLATE_FILES:
        path = ckpt.dir / name
        if path.is_file():
            return path.read_text(encoding="utf-8")
    _, named = named_templates(vocab.special)
    return named.get(SYSTEMONE) or templates.builtin(decision_type)


def chat_templates(
    vocab: Vocab, systemone: str, *, keep_named: bool = True
) -> list[dict[str, str]]:
    """The default template, the other named ones (unless dropped) and `systemone`."""
    default, named = named_templates(vocab.special)
    out = [{"name": "default", "template": default}] if default else []
    if keep_named:
        out += [{"name": n, "template": t} for n, t in named.items() if n != SYSTEMONE]
    out.append({"name": SYSTEMONE, "template": systemone})
    return out


def calibration_temperatures(ckpt: Checkpoint) -> dict[str, float]:
    """Temperatures from `calibration.json` ("temperatures") or config.json ("temperatures")."""
    calib = ckpt.optional_json("calibration.json")
    if calib is not None:
        return read_temperatures(calib.get("temperatures"), ckpt.dir / "calibration.json")
    return read_temperatures(ckpt.config.get("temperatures"), ckpt.dir / "config.json")


def write_decision(
    w: gguf.GGUFWriter, arch: str, decision_type: str, temperatures: dict[str, float]
) -> None:
    w.add_string(type_key(arch), decision_type)
    write_temperatures(w, arch, temperatures)
