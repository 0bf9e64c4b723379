"""The command line and environment of a model's child `llamactl serve`.

The child is fully described by the router: it reads no config file (LLAMACTL_CONFIG points
at an empty one) and inherits no LLAMACTL_* variable, so a key in the user's config or
environment can never make a child demand an API key the router does not send. Its one key
is a random secret of its own (`new_secret`), in LLAMACTL_API_KEY: an environment variable,
which `ps` does not show and only the same user (or root) can read, unlike the argv. Every
setting the router does not keep for itself is passed as a LLAMACTL_* variable: the router's
value, or the preset's for that model. Settings added later reach children with no change here.
What is not a setting but a fact about the model's files (its projector) is a flag of the
child's command line (`CHILD_FLAGS`).
"""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from llamactl.config import ENV_PREFIX, SETTING_NAMES, Settings

from .catalog import ModelSpec
from .preset import ROUTER_ONLY

CHILD_HOST = "127.0.0.1"
DEFAULT_LAUNCHER: tuple[str, ...] = (sys.executable, "-m", "llamactl")
# Pass-through keys of a model (preset or --models-dir pairing) -> the child's flag for them.
# `draft_model` has none: the child takes its draft model from the `model_draft` setting.
CHILD_FLAGS = {"mmproj": "--mmproj"}


def env_text(value: Any) -> str:
    """A setting's value as load_settings parses it back from an environment variable."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return os.fspath(value) if isinstance(value, Path) else str(value)


def child_settings(settings: Settings, spec: ModelSpec) -> dict[str, Any]:
    """The router's settings minus its own, with the model's preset values on top."""
    values = {name: getattr(settings, name) for name in SETTING_NAMES if name not in ROUTER_ONLY}
    values.update(spec.settings)
    return values


def new_secret() -> str:
    """A child's API key: 256 random bits, URL-safe (no comma, which would split the list)."""
    return secrets.token_urlsafe(32)


def child_env(
    settings: Settings, spec: ModelSpec, secret: str, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The child's whole environment: the router's minus LLAMACTL_*, its settings, its key."""
    inherited = os.environ if base is None else base
    env = {k: v for k, v in inherited.items() if not k.startswith(ENV_PREFIX)}
    env["LLAMACTL_CONFIG"] = os.devnull
    env[ENV_PREFIX + "API_KEY"] = secret
    for name, value in child_settings(settings, spec).items():
        if value is not None:
            env[ENV_PREFIX + name.upper()] = env_text(value)
    return env


def child_argv(
    spec: ModelSpec,
    port: int,
    launcher: tuple[str, ...] = DEFAULT_LAUNCHER,
    *,
    listen_fd: int,
) -> list[str]:
    """`llamactl serve` for one model, reporting the model's router name, serving on the
    listening socket it inherits as `listen_fd` (bound by the router to 127.0.0.1:`port`:
    the child binds nothing, so no other process can take its port first)."""
    if spec.path is None:
        raise ValueError(f"model {spec.name!r} has no file")
    flags = [
        a for key, flag in CHILD_FLAGS.items() if key in spec.extra for a in (flag, spec.extra[key])
    ]
    return [
        *launcher,
        "serve",
        "--model",
        str(spec.path),
        "--alias",
        spec.name,
        "--host",
        CHILD_HOST,
        "--port",
        str(port),
        "--listen-fd",
        str(listen_fd),
        "--log-level",
        "warning",
        *flags,
    ]
