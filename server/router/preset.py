"""Read a models preset: a TOML file of named models, each with its own serve settings.

    [small]
    model = "SmolLM2-135M-Instruct.Q4_1"   # a path (relative to this file), alias or name
    aliases = ["tiny"]
    ctx_size = 2048
    parallel = 2
    chat_template_file = "think.jinja"

Every key except `model` and `aliases` is a `llamactl serve` setting, checked here with the
same rules as the config file so a typo stops the router at start rather than a child at its
first request. Two keys are not settings: `mmproj` (a decision model's projector) reaches the
child as its `--mmproj` flag; `draft_model` (llama-server's name) is accepted and not used,
the `model_draft` setting names a draft model.
"""

from __future__ import annotations

import difflib
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llamactl import ConfigError
from llamactl.config import (
    KEY_ALIASES,
    SETTING_NAMES,
    canonical_key,
    find_key_line,
    load_settings,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

# Settings only the router uses; a child gets its model, address and (no) keys from the router.
ROUTER_ONLY = frozenset(
    {
        "model",
        "alias",
        "aliases",
        "models_dir",
        "models_preset",
        "models_max",
        "models_autoload",
        "sleep_idle_seconds",
        "host",
        "port",
        "api_key",
        "api_key_file",
    }
)
# Keys that are not settings: kept as written (paths resolved against the preset file).
PASS_THROUGH = frozenset({"draft_model", "mmproj"})
_META = ("model", "aliases")
_FROM_CLI = re.compile(r" \(from cli \(--[\w-]+\)\)$")


@dataclass(frozen=True)
class PresetModel:
    """One [table] of the preset."""

    name: str
    model: str  # as written, or absolute when it names a file next to the preset
    aliases: tuple[str, ...] = ()
    settings: dict[str, Any] = field(default_factory=dict)  # setting name -> checked value
    extra: dict[str, str] = field(default_factory=dict)  # PASS_THROUGH keys
    line: int | None = None


def read_preset(path: Path) -> list[PresetModel]:
    """Parse and check the file; raise ConfigError naming the file, line and key."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read models preset {path}: {e.strerror or e}") from e
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"models preset {path} is not valid TOML: {e}") from None
    models = []
    for name, table in data.items():
        line = find_key_line(text, name)
        if not isinstance(table, Mapping):
            raise _error(path, line, f"{name!r} must be a [table] describing one model")
        models.append(_read_model(path, text, name, table, line))
    return models


def _error(path: Path, line: int | None, message: str) -> ConfigError:
    where = f"{path}, line {line}" if line else str(path)
    return ConfigError(f"models preset {where}: {message}")


def _read_model(
    path: Path, text: str, name: str, table: Mapping[str, Any], line: int | None
) -> PresetModel:
    def fail(key: str, message: str) -> ConfigError:
        return _error(path, find_key_line(text, key, line or 1) or line, f"[{name}] {message}")

    model = table.get("model")
    if not isinstance(model, str) or not model.strip():
        raise _error(path, line, f'[{name}] needs model = "PATH_OR_NAME"')
    aliases = table.get("aliases", ())
    if isinstance(aliases, str):
        aliases = (aliases,)
    if not isinstance(aliases, (list, tuple)) or not all(isinstance(a, str) for a in aliases):
        raise fail("aliases", "aliases must be a list of strings")

    settings: dict[str, Any] = {}
    extra: dict[str, str] = {}
    for key, raw in table.items():
        if key in _META:
            continue
        setting = canonical_key(key)
        if setting in PASS_THROUGH and setting not in SETTING_NAMES:
            if not isinstance(raw, str):
                raise fail(key, f"{key} must be a path string")
            extra[setting] = _near(path, raw)
        elif setting in ROUTER_ONLY:
            raise fail(key, f"{key!r} is set by the router, not per model")
        elif setting in SETTING_NAMES:
            settings[setting] = _check_value(path, key, setting, raw, fail)
        else:
            known = [*SETTING_NAMES, *KEY_ALIASES, *PASS_THROUGH, *_META]
            close = difflib.get_close_matches(setting, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise fail(key, f"unknown key {key!r}{hint}")
    return PresetModel(name, _near(path, model), tuple(aliases), settings, extra, line)


def _check_value(path: Path, key: str, setting: str, raw: Any, fail) -> Any:
    """The value as the child will read it, checked with the config file's own rules."""
    try:
        value = getattr(load_settings({setting: raw}, config_path=os.devnull), setting)
    except ConfigError as e:
        message = _FROM_CLI.sub("", str(e)).replace(f"--{setting.replace('_', '-')}", key)
        raise fail(key, message) from None
    if isinstance(value, Path) and not value.is_absolute():
        value = (path.parent / value).absolute()
    return value


def _near(preset: Path, value: str) -> str:
    """A relative path that exists beside the preset file becomes absolute; anything else (a
    name in the models dir, an alias) is kept as written."""
    candidate = Path(value).expanduser()
    if not candidate.is_absolute() and (preset.parent / candidate).exists():
        return str((preset.parent / candidate).absolute())
    return str(candidate) if candidate.is_absolute() else value
