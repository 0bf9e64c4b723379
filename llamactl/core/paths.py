"""Where llamactl keeps its files, following the XDG base-directory spec on every platform.

One place computes these paths so tests can isolate a run by pointing the XDG_* variables at
temporary directories, and so `llamactl config` can show users exactly where to look.
"""

from __future__ import annotations

import os
from pathlib import Path

APP_NAME = "llamactl"


def _xdg_home(variable: str, fallback: str) -> Path:
    """Return $variable, or ~/fallback when it is unset, empty or relative (the spec says to
    ignore relative values)."""
    value = os.environ.get(variable, "")
    if value and os.path.isabs(value):
        return Path(value)
    return Path.home() / fallback


def config_home() -> Path:
    """$XDG_CONFIG_HOME, default ~/.config."""
    return _xdg_home("XDG_CONFIG_HOME", ".config")


def data_home() -> Path:
    """$XDG_DATA_HOME, default ~/.local/share."""
    return _xdg_home("XDG_DATA_HOME", os.path.join(".local", "share"))


def cache_home() -> Path:
    """$XDG_CACHE_HOME, default ~/.cache."""
    return _xdg_home("XDG_CACHE_HOME", ".cache")


def state_home() -> Path:
    """$XDG_STATE_HOME, default ~/.local/state."""
    return _xdg_home("XDG_STATE_HOME", os.path.join(".local", "state"))


def config_dir() -> Path:
    """Directory holding config.toml."""
    return config_home() / APP_NAME


def data_dir() -> Path:
    """Directory for data the user would miss if deleted (downloaded models)."""
    return data_home() / APP_NAME


def cache_dir() -> Path:
    """Directory for data that can be rebuilt (safe to delete)."""
    return cache_home() / APP_NAME


def state_dir() -> Path:
    """Directory for history and logs."""
    return state_home() / APP_NAME


def default_config_path() -> Path:
    """The config file used when LLAMACTL_CONFIG is not set."""
    return config_dir() / "config.toml"


def config_path() -> Path:
    """The config file to read: $LLAMACTL_CONFIG (~ expanded) if set, else the XDG default."""
    override = os.environ.get("LLAMACTL_CONFIG", "")
    if override:
        return Path(override).expanduser()
    return default_config_path()


def default_models_dir() -> Path:
    """Where models live when neither LLAMACTL_MODELS_DIR nor the config says otherwise."""
    return data_dir() / "models"
