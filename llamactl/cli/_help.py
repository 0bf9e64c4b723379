"""One look for every command's `--help`: click's plain text, options grouped by panel.

Plain text (not rich's tables) so that no option's name is ever cut at any terminal width, and
every command's usage line writes its arguments the same way (`MODEL`, `[PROMPT]`).
"""

from __future__ import annotations

import textwrap
from typing import Any

from typer.core import TyperCommand

__all__ = ["PlainHelpCommand", "write_rows"]


class PlainHelpCommand(TyperCommand):
    """A command whose help is click's text; `shown` and `hidden_note` let a subclass keep
    some options for a longer help."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        super(TyperCommand, self).format_help(ctx, formatter)  # click's, not rich's table

    def shown(self, ctx: Any, param: Any) -> bool:
        """Whether `param` is listed in this help."""
        return True

    def hidden_note(self, hidden: int) -> str | None:
        """The line naming how to see the `hidden` options left out."""
        return None

    def format_options(self, ctx: Any, formatter: Any) -> None:
        panels: dict[str, list[tuple[str, str]]] = {}
        hidden = 0
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if not self.shown(ctx, param):
                hidden += 1
                continue
            panel = getattr(param, "rich_help_panel", None) or "Options"
            panels.setdefault(panel, []).append(record)
        for title, rows in panels.items():
            with formatter.section(title):
                write_rows(formatter, rows)
        note = self.hidden_note(hidden) if hidden else None
        if note:
            formatter.write_paragraph()
            formatter.write_text(note)

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        """Arguments as `NAME` when required and `[NAME]` when not, in capitals."""
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name != "argument":
                continue
            name = (param.metavar or param.name or "").upper()
            pieces.append(name if param.required else f"[{name}]")
        return pieces


def write_rows(formatter: Any, rows: list[tuple[str, str]], name_max: int = 30) -> None:
    """click's two-column option list, wrapped without ever breaking a word at a hyphen
    (click's wrapper would print `--log-` at a line's end and `file` on the next)."""
    width = max(formatter.width - formatter.current_indent, 40)
    first = min(max((len(name) for name, _ in rows), default=0), name_max)
    help_width = max(width - first - 2, 20)
    wrapper = textwrap.TextWrapper(width=help_width, break_on_hyphens=False, break_long_words=False)
    pad = " " * formatter.current_indent
    for name, text in rows:
        lines = wrapper.wrap(" ".join(text.split())) or [""]
        if len(name) <= first:
            formatter.write(f"{pad}{name.ljust(first)}  {lines[0]}".rstrip() + "\n")
            rest = lines[1:]
        else:  # a long name: its help starts on the next line
            formatter.write(f"{pad}{name}\n")
            rest = lines
        for line in rest:
            formatter.write(f"{pad}{' ' * (first + 2)}{line}\n")
