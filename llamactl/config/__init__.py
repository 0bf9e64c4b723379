"""Settings: the model (`fields`), how one value is checked (`values`) and how the layers
flags > LLAMACTL_* > config.toml > defaults are merged (`loading`).

The mapping of Settings onto the engine lives one level up, in `llamactl.engine_settings`; the
command-line options made from the fields, in `llamactl.cli._settings_options`.
"""

from llamactl.engine.limits import physical_cores

from .fields import SETTING_NAMES, Engine, Flag, Settings, Source, SourceKind, setting_fields
from .loading import (
    ENV_PREFIX,
    KEY_ALIASES,
    SECRET_SETTINGS,
    canonical_key,
    env_names,
    find_key_line,
    load_settings,
)

__all__ = [
    "ENV_PREFIX",
    "KEY_ALIASES",
    "SECRET_SETTINGS",
    "SETTING_NAMES",
    "Engine",
    "Flag",
    "Settings",
    "Source",
    "SourceKind",
    "canonical_key",
    "env_names",
    "find_key_line",
    "load_settings",
    "physical_cores",
    "setting_fields",
]
