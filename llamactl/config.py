"""Settings, merged with the precedence CLI flags > LLAMACTL_* env vars > config.toml > defaults.

Every value remembers where it came from (`Settings.sources`, `Settings.explain()`) so that
`llamactl config` can answer "why is my port 9000?". Mistakes in the file are reported with the
file, the key and the line, because a server that silently ignores a typo is worse than one
that refuses to start.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import os
import re
import sys
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from llamactl import paths
from llamactl.core.cpu import physical_cores
from llamactl.core.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ENV_PREFIX = "LLAMACTL_"
FlashAttn = Literal["auto", "on", "off"]
KvType = Literal["bf16", "f16", "q8_0"]
SourceKind = Literal["default", "file", "env", "cli"]

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


@functools.cache
@dataclass(frozen=True)
class Source:
    """Where a setting's value came from; `detail` is the file:line, variable or flag."""

    kind: SourceKind
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.kind} ({self.detail})" if self.detail else self.kind


_INTERNAL = {"internal": True}


@dataclass
class Settings:
    """Every user-tunable setting. Build it with `load_settings`, not directly."""

    model: str | None = None
    models_dir: Path = field(default_factory=paths.default_models_dir)
    aliases: dict[str, str] = field(default_factory=dict)
    n_ctx: int = 0  # total KV positions over all slots; 0: min(train ctx, 4096) per slot
    parallel: int = 4
    threads: int = field(default_factory=physical_cores)
    batch_size: int = 512
    temperature: float = 0.8
    top_p: float = 0.95
    top_k: int = 40
    min_p: float = 0.05
    seed: int | None = None
    max_tokens: int | None = None
    system: str | None = None
    host: str = "127.0.0.1"
    port: int = 8080
    api_key: list[str] = field(default_factory=list, repr=False)  # never printed
    api_key_file: Path | None = None
    sse_ping_interval: float = 30.0
    metrics: bool = False
    max_queue: int = 64
    alias: str | None = None
    kv_unified: bool = False
    flash_attn: FlashAttn = "on"
    cache_type: KvType = "bf16"  # KV cache element type (bf16 keeps outputs batch-invariant)
    # Prompt cache, checkpoints, speculative decoding (serve)
    cache_ram: int | None = None  # MiB; -1 no limit, 0 off; None: 8192 (off for decision models)
    cache_idle_slots: bool = True
    slot_prompt_similarity: float = 0.10
    ctx_checkpoints: int = 32
    checkpoint_min_step: int = 8192
    spec_type: list[str] = field(default_factory=list)  # ngram-simple, ngram-cache, draft-simple
    model_draft: str | None = None
    spec_draft_n_max: int = 3
    spec_draft_n_min: int = 0
    spec_draft_p_min: float = 0.0
    chat_template_file: Path | None = None  # a Jinja file that replaces the model's template
    # Router mode (`serve --models-dir/--models-preset`): many models, each in a child process
    models_preset: Path | None = None  # TOML file of named models with their own settings
    models_max: int = 4  # children loaded at once; 0: no limit
    models_autoload: bool = True  # load a model on its first request
    sleep_idle_seconds: float = -1.0  # unload a child idle this long; -1: never
    # Speech in (`transcribe`, /v1/audio/transcriptions, /v1/realtime)
    transcribe_model: str | None = None  # None: the embedded Whisper tiny.en
    transcribe_mmproj: Path | None = None  # audio projector of a llama.cpp speech .gguf
    transcribe_threads: int = 0  # speech model threads; 0: same as `threads`
    # Speech out (`tts`, /tts, /v1/audio/speech, realtime answers); None: eSpeak NG
    tts_model: Path | None = None  # a llama.cpp TTS backbone .gguf (with tts_mmproj)
    tts_mmproj: Path | None = None  # its mmproj holding the audio generator
    # Speech limits (hardening): what one upload or one realtime session may hold
    max_audio_seconds: float = 3600.0  # decoded length of one transcription upload
    max_audio_upload_mib: int = 64  # size of one transcription upload
    realtime_max_buffer_seconds: float = 1200.0  # input audio a realtime session holds unread
    realtime_max_sessions: int = 32  # /v1/realtime connections served at once
    # Request limits (serve): work that grows with a request is bounded; over a limit is a 400
    max_messages: int = 4096  # chat messages / Responses input items per request
    max_stop_strings: int = 32  # OpenAI allows 4, llama-server any number
    max_stop_length: int = 512  # characters in one stop string
    max_tools: int = 128  # OpenAI's limit
    max_schema_bytes: int = 262144  # a JSON schema (tools, response formats) or GBNF grammar
    max_schema_depth: int = 64  # nesting of objects and arrays in such a schema
    max_json_values: int = 262144  # values in a body over 1 MiB (checked before it is parsed)
    # HTTP edge (serve): who may call, how much a request may send (docs/serve.md, Security)
    cors_origins: list[str] = field(default_factory=lambda: ["localhost"])  # or "*", origins
    allowed_hosts: list[str] = field(default_factory=list)  # Host names besides loopback; "*"
    max_body_size: int = 32  # MiB per request body (uploads: up to the audio file limit)
    body_timeout: float = 60.0  # seconds to receive a whole request body, else 408
    shutdown_grace: float = 10.0  # on SIGTERM/SIGINT, seconds running generations may finish
    # Bookkeeping, not settings: the file that was read (None if there was none) and where
    # each setting's value came from.
    config_file: Path | None = field(default=None, compare=False, metadata=_INTERNAL)
    sources: dict[str, Source] = field(
        default_factory=dict, repr=False, compare=False, metadata=_INTERNAL
    )

    def explain(self) -> list[tuple[str, Any, Source]]:
        """(name, value, source) for every setting, in declaration order."""
        return [
            (name, getattr(self, name), self.sources.get(name, Source("default")))
            for name in SETTING_NAMES
        ]

    def resolved_api_keys(self) -> list[str]:
        """`api_key` plus the non-blank, non-comment lines of `api_key_file`."""
        keys = list(self.api_key)
        if self.api_key_file is not None:
            try:
                text = self.api_key_file.read_text(encoding="utf-8")
            except OSError as e:
                raise ConfigError(
                    f"cannot read api_key_file {self.api_key_file} "
                    f"({self.sources.get('api_key_file', Source('default'))}): {e.strerror or e}"
                ) from e
            for line in text.splitlines():
                line = line.strip()
                if line and not line.startswith("#"):
                    keys.append(line)
        return keys


SETTING_NAMES: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(Settings) if not f.metadata.get("internal")
)
_HINTS: dict[str, Any] = typing.get_type_hints(Settings)
# Settings whose values error messages never quote (they are secrets).
SECRET_SETTINGS = frozenset({"api_key"})
# Other spellings accepted for a setting, in the file and as env var names.
KEY_ALIASES = {"ctx_size": "n_ctx"}
# Inclusive (min, max) bounds checked after merging; None means unbounded.
_LIMITS: dict[str, tuple[float | None, float | None]] = {
    "n_ctx": (0, None),
    "parallel": (1, None),
    "threads": (1, None),
    "batch_size": (1, None),
    "top_p": (0.0, 1.0),
    "top_k": (0, None),
    "min_p": (0.0, 1.0),
    "max_tokens": (0, None),
    "port": (0, 65535),
    "sse_ping_interval": (-1.0, None),
    "max_queue": (0, None),
    "transcribe_threads": (0, None),
    "models_max": (0, None),
    "sleep_idle_seconds": (-1.0, None),
    "cache_ram": (-1, None),
    "slot_prompt_similarity": (0.0, 1.0),
    "ctx_checkpoints": (0, None),
    "checkpoint_min_step": (0, None),
    "spec_draft_n_max": (1, 48),
    "spec_draft_n_min": (0, 48),
    "spec_draft_p_min": (0.0, 1.0),
    # speech limits
    "max_audio_seconds": (1.0, None),
    "max_audio_upload_mib": (1, None),
    "realtime_max_buffer_seconds": (60.0, None),
    "realtime_max_sessions": (1, None),
    "max_messages": (1, None),
    "max_stop_strings": (0, None),
    "max_stop_length": (1, None),
    "max_tools": (0, None),
    "max_schema_bytes": (1, None),
    "max_schema_depth": (1, None),
    "max_json_values": (1, None),
    # HTTP edge
    "max_body_size": (1, None),
    "body_timeout": (0.1, None),
    "shutdown_grace": (0.0, None),
}


class _BadValue(Exception):
    """A value that does not fit its setting's type; the caller adds where it came from."""


def _shown(name: str, error: _BadValue) -> str:
    """The error as the user may see it: for a secret, what was expected but not the value."""
    return str(error).split(", got ")[0] if name in SECRET_SETTINGS else str(error)


def _describe(value: Any) -> str:
    kind = {bool: "boolean", int: "integer", float: "float", str: "string"}.get(type(value))
    if kind is None:
        kind = "table" if isinstance(value, Mapping) else type(value).__name__
    return f"{kind} {value!r}"


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise _BadValue(f"expected true or false, got {text!r}")


def _coerce(value: Any, hint: Any, *, from_text: bool) -> Any:
    """Check (and, for env var text, parse) one value against a Settings type hint."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):  # X | None
        if value is None:
            return None
        inner = next(a for a in args if a is not type(None))
        return _coerce(value, inner, from_text=from_text)
    if origin is Literal:
        return _coerce_choice(value, args, from_text=from_text)
    if origin is list:
        if from_text and isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        if isinstance(value, str):
            return [value]
        if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            return list(value)
        raise _BadValue(f"expected a string or a list of strings, got {_describe(value)}")
    if origin is dict:
        if isinstance(value, Mapping):
            for k, v in value.items():
                if not isinstance(v, (str, os.PathLike)):
                    raise _BadValue(f"expected a string for {k!r}, got {_describe(v)}")
            return {str(k): os.fspath(v) for k, v in value.items()}
        raise _BadValue(f"expected a table, got {_describe(value)}")
    if hint is bool:
        if isinstance(value, bool):
            return value
        if from_text and isinstance(value, str):
            return _parse_bool(value)
        raise _BadValue(f"expected true or false, got {_describe(value)}")
    if hint is int:
        if from_text and isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                raise _BadValue(f"expected an integer, got {value!r}") from None
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise _BadValue(f"expected an integer, got {_describe(value)}")
    if hint is float:
        if from_text and isinstance(value, str):
            try:
                return float(value.strip())
            except ValueError:
                raise _BadValue(f"expected a number, got {value!r}") from None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise _BadValue(f"expected a number, got {_describe(value)}")
    if hint is str:
        if isinstance(value, str):
            return value
        raise _BadValue(f"expected a string, got {_describe(value)}")
    if hint is Path:
        if isinstance(value, (str, os.PathLike)):
            return Path(value).expanduser()
        raise _BadValue(f"expected a path string, got {_describe(value)}")
    raise TypeError(f"no coercion for setting type {hint!r}")  # a new field needs a rule


def _coerce_choice(value: Any, choices: tuple[str, ...], *, from_text: bool) -> str:
    """One of `choices`; booleans map to "on"/"off" when those are choices (flash_attn)."""
    if isinstance(value, str) and value.strip().lower() in choices:
        return value.strip().lower()
    if {"on", "off"} <= set(choices):
        if isinstance(value, bool):
            return "on" if value else "off"
        if from_text and isinstance(value, str):
            try:
                return "on" if _parse_bool(value) else "off"
            except _BadValue:
                pass
    allowed = ", ".join(repr(c) for c in choices)
    raise _BadValue(f"expected one of {allowed}, got {_describe(value)}")


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


def _read_config_file(path: Path, *, explicit: bool) -> dict[str, tuple[Any, Source]] | None:
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

    values: dict[str, tuple[Any, Source]] = {}
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
            value = _coerce(value, _HINTS[name], from_text=False)
        except _BadValue as e:
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
                    f"got {_describe(target)}",
                )
        return {alias: os.path.expanduser(target) for alias, target in raw.items()}
    return raw


def _env_names(name: str) -> list[str]:
    return [
        ENV_PREFIX + n.upper() for n in (name, *(a for a, c in KEY_ALIASES.items() if c == name))
    ]


def _read_env() -> dict[str, tuple[Any, Source]]:
    """LLAMACTL_<NAME> for every setting except `aliases`; empty variables count as unset."""
    values: dict[str, tuple[Any, Source]] = {}
    for name in SETTING_NAMES:
        if name == "aliases":
            continue
        present = [var for var in _env_names(name) if os.environ.get(var, "") != ""]
        if not present:
            continue
        if len(present) > 1:
            raise ConfigError(f"environment variables {' and '.join(present)} both set; keep one")
        var = present[0]
        text = os.environ[var]
        try:
            value = _coerce(text, _HINTS[name], from_text=True)
        except _BadValue as e:
            raise ConfigError(f"invalid value in environment variable {var}: {e}") from None
        values[name] = (value, Source("env", var))
    return values


def _read_cli(overrides: Mapping[str, Any]) -> dict[str, tuple[Any, Source]]:
    values: dict[str, tuple[Any, Source]] = {}
    for key, raw in overrides.items():
        if raw is None:
            continue
        name = canonical_key(key)
        if name not in SETTING_NAMES:
            raise ValueError(f"load_settings: unknown setting {key!r} in cli_overrides")
        flag = "--" + key.replace("_", "-")
        try:
            value = _coerce(raw, _HINTS[name], from_text=isinstance(raw, str))
        except _BadValue as e:
            raise ConfigError(f"invalid value for {flag}: {_shown(name, e)}") from None
        values[name] = (value, Source("cli", flag))
    return values


def _check_limits(values: Mapping[str, Any], sources: Mapping[str, Source]) -> None:
    for name, (low, high) in _LIMITS.items():
        value = values[name]
        if value is None:
            continue
        if (low is not None and value < low) or (high is not None and value > high):
            bounds = f">= {low}" if high is None else f"between {low} and {high}"
            raise ConfigError(f"{name} must be {bounds}, got {value} (from {sources[name]})")


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
    _check_limits(merged, sources)
    return Settings(
        **merged, config_file=path if file_values is not None else None, sources=sources
    )
