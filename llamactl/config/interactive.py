"""The defaults of the commands a person reads as the answer streams (`chat`, `tui`).

A server answers programs, which set their own limits, so `serve` keeps llama-server's
defaults (no answer limit, no repetition penalty). A person asking a small model a question at
`-t 0` would rather get a bounded answer that does not loop, so the interactive commands use
the values below for each of these settings the user left at its default (a flag, a
`LLAMACTL_*` variable or the config file wins; `--max-tokens -1` lifts the limit).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .fields import Settings

__all__ = ["INTERACTIVE", "InteractiveDefaults", "interactive_settings"]


@dataclass(frozen=True)
class InteractiveDefaults:
    """Setting name -> value, for the settings whose interactive default differs."""

    max_tokens: int = 1024
    repeat_penalty: float = 1.1
    dry_multiplier: float = 0.8


INTERACTIVE = InteractiveDefaults()


def interactive_settings(settings: Settings) -> Settings:
    """`settings` with the interactive defaults in place of the defaults the user kept."""
    from .fields import Source

    changed = {
        f.name: getattr(INTERACTIVE, f.name)
        for f in dataclasses.fields(INTERACTIVE)
        if settings.sources.get(f.name, Source("default")).kind == "default"
    }
    if not changed:
        return settings
    out = dataclasses.replace(settings, **changed)
    out.config_file = settings.config_file
    out.sources = {**settings.sources, **dict.fromkeys(changed, Source("default", "interactive"))}
    return out
