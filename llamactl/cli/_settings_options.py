"""Command-line options made from the settings model.

A command decorated with `settings_options("serve")` gets one option per setting whose `Flag`
names that command: the flag, its help text and the default shown in `--help` come from the
field (`llamactl.config.fields`), so no command repeats a default or a bound. The values given
reach the command as `overrides` (setting name -> value; None: not given), ready for
`load_settings`.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from llamactl.cli._help import PlainHelpCommand
from llamactl.config import Flag, setting_fields
from llamactl.config.fields import SERVE

__all__ = ["SettingsCommand", "default_text", "settings_options", "setting_help"]

OVERRIDES = "overrides"


def _flag(name: str) -> Flag | None:
    return next((m for m in setting_fields()[name].metadata if isinstance(m, Flag)), None)


def default_text(name: str) -> str | None:
    """The default of a setting as `--help` shows it; None when there is nothing to show."""
    flag = _flag(name)
    if flag is not None and flag.shown_default is not None:
        return flag.shown_default
    info = setting_fields()[name]
    value = info.get_default(call_default_factory=True)
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, list):
        return ", ".join(value) or "none"
    if isinstance(value, float):
        return f"{value:g}"
    return None if value is None else str(value)


def setting_help(name: str) -> str:
    """The field's description followed by its default: `Port [8080].`"""
    text = setting_fields()[name].description or ""
    shown = default_text(name)
    return f"{text.rstrip('.')} [{shown}]." if shown is not None else text


def _option_type(name: str) -> Any:
    """What the option parses: lists and choices arrive as text, checked by load_settings."""
    hint = setting_fields()[name].annotation
    args = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
    inner = args[0] if len(args) == 1 else hint
    if inner in (bool, int, float, Path):
        return inner
    if typing.get_origin(inner) in (list, Literal) or inner is str:
        return str
    raise TypeError(f"setting {name!r} has no command-line form for {hint!r}")


def _option_names(command: str, name: str, flag: Flag) -> list[str]:
    """The option strings a setting has on `command`: its long name, aliases and short one."""
    names = [flag.long or "--" + name.replace("_", "-"), *flag.aliases]
    if flag.short and command not in flag.no_short:
        names.append(flag.short)
    return names


def _parameter(command: str, name: str, flag: Flag) -> inspect.Parameter:
    kind = _option_type(name)
    decls = _option_names(command, name, flag)
    if kind is bool and flag.negatable:
        decls[0] = f"{decls[0]}/--no-{decls[0][2:]}"
    if flag.repeatable:
        kind = list[str]
    option = typer.Option(
        *decls,
        help=setting_help(name),
        metavar=flag.metavar,
        rich_help_panel=flag.panel,
        show_default=False,
    )
    return inspect.Parameter(
        name,
        inspect.Parameter.KEYWORD_ONLY,
        default=None,
        annotation=Annotated[kind | None, option],
    )


def _parameters(command: str) -> list[inspect.Parameter]:
    return [
        _parameter(command, name, flag)
        for name in setting_fields()
        if (flag := _flag(name)) is not None and command in flag.commands
    ]


def _compat_parameters() -> list[inspect.Parameter]:
    """llama-server's flags serve has no option of its own for (llama_server_flags.py),
    hidden from --help."""
    from .llama_server_flags import LLAMA_SERVER_FLAGS

    out = []
    for i, entry in enumerate(LLAMA_SERVER_FLAGS):
        kind: Any = str if entry.takes_value else bool
        option = typer.Option(*entry.spellings, hidden=True, show_default=False)
        out.append(
            inspect.Parameter(
                f"{_COMPAT}{i}",
                inspect.Parameter.KEYWORD_ONLY,
                default=None,
                annotation=Annotated[kind | None, option],
            )
        )
    return out


def _apply_compat(kwargs: dict[str, Any], overrides: dict[str, Any]) -> None:
    """Take the llama-server flags out of `kwargs`: their values into `overrides` (or serve's
    own parameters), a note on stderr for the ones accepted without effect, a usage error
    (exit 2) for the ones refused."""
    from llamactl.cli._output import print_note

    from .llama_server_flags import GIVEN, LLAMA_SERVER_FLAGS

    for i, entry in enumerate(LLAMA_SERVER_FLAGS):
        given = kwargs.pop(f"{_COMPAT}{i}")
        if given is None or given is False:
            continue
        if entry.action == "refuse":
            raise typer.BadParameter(
                f"llama-server's flag is not supported by llamactl: {entry.text}.",
                param_hint=f"'{entry.name}'",
            )
        if entry.action == "note":
            print_note(f"{entry.name}: {entry.text}.")
            continue
        value = given if entry.value is GIVEN else entry.value
        if entry.join:  # a part of another flag's value (-hff FILE: -hf REPO:FILE)
            if overrides.get(entry.target) is None:
                raise typer.BadParameter(
                    f"needs the flag it completes ({entry.target})", param_hint=f"'{entry.name}'"
                )
            overrides[entry.target] = f"{overrides[entry.target]}{entry.join}{value}"
        elif entry.target not in overrides:  # one of the command's own parameters
            kwargs[entry.target] = value
        elif overrides[entry.target] not in (None, value):  # its own flag was given too
            print_note(f"{entry.name}: ignored, {entry.target} is {overrides[entry.target]}.")
            continue
        else:
            overrides[entry.target] = value
        if entry.text:
            print_note(f"{entry.name}: {entry.text}.")


_COMPAT = "llama_server_flag_"


def _bare_values(command: str) -> dict[str, str]:
    """Option strings of `command` that may stand alone, and the value they then stand for."""
    out: dict[str, str] = {}
    for name in setting_fields():
        flag = _flag(name)
        if flag is None or flag.bare_value is None or command not in flag.commands:
            continue
        out.update(dict.fromkeys(_option_names(command, name, flag), flag.bare_value))
    return out


HELP_ALL = "llamactl_help_all"  # ctx.meta key: --help-all was given


def _show_all_help(ctx: typer.Context, value: bool) -> None:
    if value:
        ctx.meta[HELP_ALL] = True
        typer.echo(ctx.get_help())
        raise typer.Exit()


def _help_all_parameter() -> inspect.Parameter:
    option = typer.Option(
        "--help-all",
        help="Show every option, grouped by topic.",
        is_eager=True,
        callback=_show_all_help,
    )
    return inspect.Parameter(
        _HELP_ALL_PARAM,
        inspect.Parameter.KEYWORD_ONLY,
        default=False,
        annotation=Annotated[bool, option],
    )


_HELP_ALL_PARAM = "help_all"


class SettingsCommand(PlainHelpCommand):
    """A command whose options may be given without their value where llama.cpp allows it
    (`-fa` alone is `-fa on`): the value is put in before click parses the line.

    Its `--help` is one screen: the command's own options and the settings marked common,
    each topic under its heading, and a line naming `--help-all` for the rest. It is written
    as plain text, so no option's name is ever cut, whatever the terminal's width."""

    def shown(self, ctx: Any, param: Any) -> bool:
        flag = _flag(param.name) if param.name in setting_fields() else None
        return flag is None or flag.common or bool(ctx.meta.get(HELP_ALL))

    def hidden_note(self, hidden: int) -> str | None:
        return (
            f"{hidden} more options (prompt cache, speculation, LoRA, limits, GPU, "
            f"llama-server names...): llamactl {self.name} --help-all"
        )

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        bare = _bare_values(self.name or "")
        out: list[str] = []
        for i, arg in enumerate(args):
            out.append(arg)
            if arg == "--":
                out.extend(args[i + 1 :])
                break
            following = args[i + 1] if i + 1 < len(args) else None
            if arg in bare and (following is None or following.startswith("-")):
                out.append(bare[arg])
        return super().parse_args(ctx, out)


def _joined(value: Any) -> Any:
    """A repeatable flag's values as one comma-separated text (None when not given)."""
    if isinstance(value, (list, tuple)):
        return ",".join(value) if value else None
    return value


def settings_options(command: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a command taking `overrides`: Typer sees the settings' options in its place."""

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        generated = _parameters(command)
        names = {p.name for p in generated}
        own = [p for p in inspect.signature(func, eval_str=True).parameters.values()]
        kept = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own if p.name != OVERRIDES]
        compat = _compat_parameters() if command == SERVE else []

        @functools.wraps(func)
        def command_with_settings(**kwargs: Any) -> Any:
            kwargs.pop(_HELP_ALL_PARAM, None)
            overrides = {name: _joined(kwargs.pop(name)) for name in names}
            if compat:
                _apply_compat(kwargs, overrides)
            return func(**kwargs, overrides=overrides)

        params = [*generated, *kept, _help_all_parameter(), *compat]  # settings' panels first
        # inspect reads __signature__ first; typeshed does not declare it on functions
        command_with_settings.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        command_with_settings.__annotations__ = {p.name: p.annotation for p in params}
        del command_with_settings.__wrapped__  # Typer must read the new signature
        return command_with_settings

    return decorate
