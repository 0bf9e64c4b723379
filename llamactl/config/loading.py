"""Settings, merged with the precedence CLI flags > LLAMACTL_* env vars > config.toml > defaults.

Every value remembers where it came from (`Settings.sources`, `Settings.explain()`) so that
`llamactl config` can answer "why is my port 9000?". Mistakes in the file are reported with the
file, the key and the line, because a server that silently ignores a typo is worse than one
that refuses to start. (pydantic-settings merges the same layers, but it keeps neither the
source of each value nor the line of a bad key; so the layers are read here and pydantic only
checks the values and the bounds.)
"""

from __future__ import annotations

import difflib
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import annotated_types
from pydantic import ValidationError

from llamactl.core import paths
from llamactl.core.errors import ConfigError

from .fields import SETTING_NAMES, Settings, Source, setting_fields
from .values import BadValue, check_value, describe

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = [
    "ENV_PREFIX",
    "KEY_ALIASES",
    "SECRET_SETTINGS",
    "canonical_key",
    "env_names",
    "find_key_line",
    "load_settings",
]

ENV_PREFIX = "LLAMACTL_"
# Settings whose values error messages never quote (they are secrets).
SECRET_SETTINGS = frozenset({"api_key"})
# Other spellings accepted for a setting, in the file and as env var names.
KEY_ALIASES = {"ctx_size": "n_ctx"}
# llama-server's environment variables (common/arg.cpp), read when the setting's LLAMACTL_*
# variable is unset, so a deployment's environment carries over.
LLAMA_SERVER_ENV = {
    "model": "LLAMA_ARG_MODEL",
    "model_url": "LLAMA_ARG_MODEL_URL",
    "n_ctx": "LLAMA_ARG_CTX_SIZE",
    "parallel": "LLAMA_ARG_N_PARALLEL",
    "threads": "LLAMA_ARG_THREADS",
    "batch_size": "LLAMA_ARG_BATCH",
    "ubatch_size": "LLAMA_ARG_UBATCH",
    "temperature": "LLAMA_ARG_TEMPERATURE",
    "top_k": "LLAMA_ARG_TOP_K",
    "top_p": "LLAMA_ARG_TOP_P",
    "min_p": "LLAMA_ARG_MIN_P",
    "max_tokens": "LLAMA_ARG_N_PREDICT",
    "host": "LLAMA_ARG_HOST",
    "port": "LLAMA_ARG_PORT",
    "api_prefix": "LLAMA_ARG_API_PREFIX",
    "timeout": "LLAMA_ARG_TIMEOUT",
    "api_key": "LLAMA_API_KEY",
    "api_key_file": "LLAMA_ARG_API_KEY_FILE",
    "alias": "LLAMA_ARG_ALIAS",
    "tags": "LLAMA_ARG_TAGS",
    "sse_ping_interval": "LLAMA_ARG_SSE_PING_INTERVAL",
    "metrics": "LLAMA_ARG_ENDPOINT_METRICS",
    "slots": "LLAMA_ARG_ENDPOINT_SLOTS",
    "props": "LLAMA_ARG_ENDPOINT_PROPS",
    "kv_unified": "LLAMA_ARG_KV_UNIFIED",
    "flash_attn": "LLAMA_ARG_FLASH_ATTN",
    "cache_type": "LLAMA_ARG_CACHE_TYPE_K",
    "cache_ram": "LLAMA_ARG_CACHE_RAM",
    "cache_idle_slots": "LLAMA_ARG_CACHE_IDLE_SLOTS",
    "ctx_checkpoints": "LLAMA_ARG_CTX_CHECKPOINTS",
    "spec_type": "LLAMA_ARG_SPEC_TYPE",
    "hf_repo": "LLAMA_ARG_HF_REPO",
    "model_draft": "LLAMA_ARG_SPEC_DRAFT_MODEL",
    "spec_draft_n_max": "LLAMA_ARG_SPEC_DRAFT_N_MAX",
    "spec_draft_n_min": "LLAMA_ARG_SPEC_DRAFT_N_MIN",
    "spec_draft_p_min": "LLAMA_ARG_SPEC_DRAFT_P_MIN",
    "chat_template": "LLAMA_ARG_CHAT_TEMPLATE",
    "chat_template_file": "LLAMA_ARG_CHAT_TEMPLATE_FILE",
    "jinja": "LLAMA_ARG_JINJA",
    "cont_batching": "LLAMA_ARG_CONT_BATCHING",
    "reasoning": "LLAMA_ARG_REASONING",
    "reasoning_budget": "LLAMA_ARG_THINK_BUDGET",
    "reasoning_format": "LLAMA_ARG_THINK",
    "chat_template_kwargs": "LLAMA_ARG_CHAT_TEMPLATE_KWARGS",
    "embedding": "LLAMA_ARG_EMBEDDINGS",
    "pooling": "LLAMA_ARG_POOLING",
    "rerank": "LLAMA_ARG_RERANKING",
    "cors_origins": "LLAMA_ARG_CORS_ORIGINS",
    "models_dir": "LLAMA_ARG_MODELS_DIR",
    "models_preset": "LLAMA_ARG_MODELS_PRESET",
    "models_max": "LLAMA_ARG_MODELS_MAX",
    "models_autoload": "LLAMA_ARG_MODELS_AUTOLOAD",
}

Layer = dict[str, tuple[Any, Source]]


def _shown(name: str, error: BadValue) -> str:
    """The error as the user may see it: for a secret, what was expected but not the value."""
    return str(error).split(", got ")[0] if name in SECRET_SETTINGS else str(error)


def canonical_key(key: str) -> str:
    """The setting name for a key as a user may write it: kebab-case or an alias."""
    name = key.strip().replace("-", "_").lower()
    return KEY_ALIASES.get(name, name)


def _unknown_key_hint(name: str) -> str:
    close = difflib.get_close_matches(name, [*SETTING_NAMES, *KEY_ALIASES], n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def find_key_line(text: str, key: str, start_line: int = 1) -> int | None:
    """1-based line where `key` is assigned (or opened as a [table]) at or after start_line.

    tomllib does not report positions of valid keys, so we scan the text ourselves.
    """
    k = re.escape(key)
    pattern = re.compile(
        rf"^\s*(?:(?:{k}|\"{k}\"|'{k}')\s*[=.]|\[\s*(?:{k}|\"{k}\"|'{k}')\s*[\].])"
    )
    for number, line in enumerate(text.splitlines(), start=1):
        if number >= start_line and pattern.match(line):
            return number
    return None


def _file_error(path: Path, line: int | None, message: str) -> ConfigError:
    where = f"{path}, line {line}" if line else str(path)
    return ConfigError(f"config file {where}: {message}")


def _read_config_file(path: Path, *, explicit: bool) -> Layer | None:
    """Parse and type-check the config file; None when a default-location file is absent."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if explicit:
            raise ConfigError(f"config file {path} does not exist") from None
        return None
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path} is not UTF-8 text") from None
    except OSError as e:
        raise ConfigError(f"cannot read config file {path}: {e.strerror or e}") from e
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"config file {path} is not valid TOML: {e}") from None

    values: Layer = {}
    spelled: dict[str, str] = {}
    for key, raw in data.items():
        name = canonical_key(key)
        line = find_key_line(text, key)
        if name not in SETTING_NAMES:
            raise _file_error(path, line, f"unknown key {key!r}{_unknown_key_hint(name)}")
        if name in spelled:
            raise _file_error(path, line, f"{key!r} repeats {spelled[name]!r}; keep one")
        spelled[name] = key
        value = raw
        if name == "aliases":
            value = _check_aliases(path, text, key, raw, line)
        try:
            value = check_value(name, value, from_text=False)
        except BadValue as e:
            raise _file_error(path, line, f"invalid value for {key!r}: {_shown(name, e)}") from None
        if isinstance(value, Path) and not value.is_absolute():
            value = path.parent / value  # relative paths are relative to the file
        values[name] = (value, Source("file", f"{path}:{line}" if line else str(path)))
    return values


def _check_aliases(path: Path, text: str, key: str, raw: Any, line: int | None) -> Any:
    """Point at the offending alias entry's own line, not just the [aliases] header."""
    if isinstance(raw, Mapping):
        for alias, target in raw.items():
            if not isinstance(target, str):
                alias_line = find_key_line(text, alias, start_line=line or 1) or line
                raise _file_error(
                    path,
                    alias_line,
                    f"invalid value for {key}.{alias}: expected a path string, "
                    f"got {describe(target)}",
                )
        return {alias: os.path.expanduser(target) for alias, target in raw.items()}
    return raw


def env_names(name: str) -> list[str]:
    """The environment variables that set `name`: LLAMACTL_<NAME> and its aliases'."""
    return [
        ENV_PREFIX + n.upper() for n in (name, *(a for a, c in KEY_ALIASES.items() if c == name))
    ]


def _check_env_spelling() -> None:
    """A LLAMACTL_* variable one typo away from a setting's is an error naming the right one
    (as an unknown config key is); unrelated LLAMACTL_* variables stay ignored."""
    known = {ENV_PREFIX + n.upper() for n in (*SETTING_NAMES, *KEY_ALIASES)}
    for var in sorted(os.environ):
        if not var.startswith(ENV_PREFIX) or var in known:
            continue
        close = difflib.get_close_matches(var, sorted(known), n=1, cutoff=0.9)
        if close:
            raise ConfigError(
                f"environment variable {var} is not a setting; did you mean {close[0]}?"
            )


def _read_env() -> Layer:
    """LLAMACTL_<NAME> for every setting except `aliases` (else llama-server's LLAMA_ARG_*
    name, `LLAMA_SERVER_ENV`); empty variables count as unset."""
    _check_env_spelling()
    values: Layer = {}
    for name in SETTING_NAMES:
        if name == "aliases":
            continue
        present = [var for var in env_names(name) if os.environ.get(var, "") != ""]
        theirs = LLAMA_SERVER_ENV.get(name)
        if not present and theirs is not None and os.environ.get(theirs, "") != "":
            present = [theirs]  # llama-server's name, when llamactl's own is unset
        if not present:
            continue
        if len(present) > 1:
            raise ConfigError(f"environment variables {' and '.join(present)} both set; keep one")
        var = present[0]
        try:
            value = check_value(name, os.environ[var], from_text=True)
        except BadValue as e:
            raise ConfigError(f"invalid value in environment variable {var}: {e}") from None
        values[name] = (value, Source("env", var))
    return values


def _read_cli(overrides: Mapping[str, Any]) -> Layer:
    values: Layer = {}
    for key, raw in overrides.items():
        if raw is None:
            continue
        name = canonical_key(key)
        if name not in SETTING_NAMES:
            raise ValueError(f"load_settings: unknown setting {key!r} in cli_overrides")
        flag = "--" + key.replace("_", "-")
        try:
            value = check_value(name, raw, from_text=isinstance(raw, str))
        except BadValue as e:
            raise ConfigError(f"invalid value for {flag}: {_shown(name, e)}") from None
        values[name] = (value, Source("cli", flag))
    return values


def _bounds(name: str) -> str:
    """`>= 1` or `between 0 and 65535`, from the field's own constraints."""
    low = high = None
    for item in setting_fields()[name].metadata:
        if isinstance(item, annotated_types.Ge):
            low = item.ge
        elif isinstance(item, annotated_types.Le):
            high = item.le
    return f">= {low}" if high is None else f"between {low} and {high}"


def _build(merged: dict[str, Any], sources: dict[str, Source], path: Path | None) -> Settings:
    """The Settings, bounds checked by pydantic; a value out of them names its source."""
    try:
        settings = Settings(**merged)
    except ValidationError as e:
        error = e.errors()[0]
        name = str(error["loc"][0])
        cause = error.get("ctx", {}).get("error")
        rule = str(cause) if isinstance(cause, ValueError) else f"{name} must be {_bounds(name)}"
        given = "" if ", got " in rule else f", got {merged[name]}"  # unless the rule names it
        raise ConfigError(f"{rule}{given} (from {sources[name]})") from None
    settings.config_file = path
    settings.sources = sources
    return settings


def load_settings(
    cli_overrides: Mapping[str, Any] | None = None,
    *,
    config_path: str | os.PathLike[str] | None = None,
) -> Settings:
    """Merge defaults, the config file, LLAMACTL_* variables and CLI values, in that order.

    `cli_overrides` maps setting names (snake- or kebab-case) to values; None means "flag not
    given". `config_path` (a --config flag) beats $LLAMACTL_CONFIG, which beats the XDG default;
    an explicitly named file must exist. Raises ConfigError on any bad value.
    """
    if config_path is not None:
        path, explicit = Path(config_path).expanduser(), True
    else:
        path, explicit = paths.config_path(), bool(os.environ.get("LLAMACTL_CONFIG"))

    defaults = Settings()
    merged: dict[str, Any] = {name: getattr(defaults, name) for name in SETTING_NAMES}
    sources: dict[str, Source] = dict.fromkeys(SETTING_NAMES, Source("default"))
    file_values = _read_config_file(path, explicit=explicit)
    for layer in (file_values or {}, _read_env(), _read_cli(cli_overrides or {})):
        for name, (value, source) in layer.items():
            merged[name] = value
            sources[name] = source
    return _build(merged, sources, path if file_values is not None else None)
