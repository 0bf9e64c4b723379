"""Settings → the engine's configs: the one mapping, used by every front end that builds an
engine (`llamactl chat`, `llamactl serve`, the TUI's in-process server, `llamactl score`).

Each setting with an `Engine` marker (`llamactl.config.fields`) sets the engine-config field
it names, converted if the marker says so; nothing here lists settings one by one. So a new
engine setting is a field in `Settings` and one in `EngineConfig`, and `chat` and `serve`
cannot size or configure an engine differently.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llamactl.config import Engine, Settings, setting_fields
from llamactl.core.errors import ConfigError
from llamactl.engine.types import SamplingParams

if TYPE_CHECKING:
    from llamactl.engine.decision import DecisionConfig
    from llamactl.engine.engine import Engine as ChatEngine
    from llamactl.engine.engine import EngineConfig
    from llamactl.engine.model import ModelLoad

__all__ = [
    "chat_template",
    "chat_template_kwargs",
    "decision_config",
    "default_grammar",
    "engine_config",
    "engine_values",
    "gpu_note",
    "model_load",
    "open_engine",
    "sampling_defaults",
]


def _markers() -> dict[str, Engine]:
    """setting name -> its Engine marker, for the settings that configure the engine."""
    found = {}
    for name, info in setting_fields().items():
        marker = next((m for m in info.metadata if isinstance(m, Engine)), None)
        if marker is not None:
            found[name] = marker
    return found


def engine_values(settings: Settings, targets: set[str]) -> dict[str, Any]:
    """The engine-config fields among `targets` that settings set, with the engine's values."""
    values: dict[str, Any] = {}
    for name, marker in _markers().items():
        if marker.target not in targets:
            continue
        value = getattr(settings, name)
        if marker.model_ref and value is not None:
            from llamactl.models import resolve_model

            value = resolve_model(settings, value).path
        values[marker.target] = marker.convert(value) if marker.convert else value
    return values


def engine_config(settings: Settings) -> EngineConfig:
    """The chat engine's config (KV sizing: n_ctx 0 is min(train ctx, 4096) per slot)."""
    from llamactl.engine.engine import EngineConfig

    names = {f.name for f in dataclasses.fields(EngineConfig)}
    return EngineConfig(**engine_values(settings, names))


def model_load(settings: Settings) -> ModelLoad:
    """How the model's weights are placed and mapped (-ngl, --split-mode, --mlock, ...)."""
    from llamactl.config.fields import Weights
    from llamactl.engine.model import ModelLoad

    values: dict[str, Any] = {}
    for name, info in setting_fields().items():
        for marker in info.metadata:
            if isinstance(marker, Weights):
                value = getattr(settings, name)
                values[marker.target] = marker.convert(value) if marker.convert else value
    return ModelLoad(**values)


def check_rpc(settings: Settings) -> None:
    """--rpc on a build without llama.cpp's RPC backend: an error before anything starts."""
    if not settings.rpc:
        return
    from llamactl.engine.rpc import rpc_unsupported

    missing = rpc_unsupported()
    if missing:
        raise ConfigError(missing)


def gpu_note(settings: Settings) -> str | None:
    """The one line a CPU-only build prints when GPU flags were given: accepted, no effect."""
    given = [
        name
        for name in ("n_gpu_layers", "split_mode", "main_gpu", "tensor_split")
        if settings.sources.get(name) is not None and settings.sources[name].kind != "default"
    ]
    if not given:
        return None
    from llamactl.engine.model import gpu_offload_supported

    if gpu_offload_supported():
        return None
    return (
        "note: this llama-cpp-python has no GPU backend, so the model stays on the CPU "
        "(-ngl/--split-mode/--main-gpu/--tensor-split change nothing; docs/serve.md, GPUs)"
    )


def decision_config(settings: Settings) -> DecisionConfig:
    """A decision engine's config: the same settings, where DecisionConfig has the field."""
    from llamactl.engine.decision import DecisionConfig

    names = {f.name for f in dataclasses.fields(DecisionConfig)}
    return DecisionConfig(**engine_values(settings, names))


def sampling_defaults(settings: Settings) -> SamplingParams:
    """Sampling for a request that sets nothing itself."""
    return SamplingParams(
        presence_penalty=settings.presence_penalty,
        frequency_penalty=settings.frequency_penalty,
        grammar=default_grammar(settings),
        temperature=settings.temperature,
        top_p=settings.top_p,
        top_k=settings.top_k,
        min_p=settings.min_p,
        repeat_penalty=settings.repeat_penalty,
        repeat_last_n=settings.repeat_last_n,
        dry_multiplier=settings.dry_multiplier,
        dry_base=settings.dry_base,
        dry_allowed_length=settings.dry_allowed_length,
        dry_penalty_last_n=settings.dry_penalty_last_n,
        seed=settings.seed,
    )


def default_grammar(settings: Settings) -> str | None:
    """The grammar every answer follows unless its request asks for another (llama-server's
    --grammar, --grammar-file, -j, -jf: one of them); read once, ConfigError when unusable."""
    return _default_grammar(
        settings.grammar,
        settings.grammar_file,
        settings.json_schema,
        settings.json_schema_file,
        settings.max_schema_bytes,
        settings.max_schema_depth,
    )


@functools.lru_cache(maxsize=8)
def _default_grammar(
    grammar: str | None,
    grammar_file: Path | None,
    schema: str | None,
    schema_file: Path | None,
    max_bytes: int,
    max_depth: int,
) -> str | None:
    from llamactl.core.errors import InvalidRequestError
    from llamactl.engine.grammar import check_nesting, json_schema_grammar

    given = [
        flag
        for flag, value in (
            ("--grammar", grammar),
            ("--grammar-file", grammar_file),
            ("--json-schema", schema),
            ("--json-schema-file", schema_file),
        )
        if value is not None
    ]
    if len(given) > 1:
        raise ConfigError(f"{' and '.join(given)}: give one default grammar or schema, not both")
    if grammar_file is not None:
        grammar = _read_setting_file("grammar_file", grammar_file, max_bytes)
    if schema_file is not None:
        schema = _read_setting_file("json_schema_file", schema_file, max_bytes)
    try:
        if schema is not None:
            if len(schema.encode()) > max_bytes:
                raise InvalidRequestError(f"over max_schema_bytes ({max_bytes} bytes)")
            if _json_depth(schema) > max_depth:  # json.loads would recurse past the stack
                raise InvalidRequestError(f"nested deeper than max_schema_depth ({max_depth})")
            try:
                value = json.loads(schema)
            except ValueError as exc:
                raise InvalidRequestError(f"not valid JSON: {exc}") from None
            grammar = json_schema_grammar(value)
        if grammar is not None:
            if len(grammar.encode()) > max_bytes:
                raise InvalidRequestError(f"over max_schema_bytes ({max_bytes} bytes)")
            check_nesting(grammar)
    except InvalidRequestError as exc:
        raise ConfigError(f"{given[0]}: {exc}") from None
    return grammar


def _json_depth(text: str) -> int:
    """How deep `text`'s objects and arrays nest, read without parsing (strings skipped)."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def _read_setting_file(name: str, path: Path, max_bytes: int) -> str:
    """A setting's file as text: a regular UTF-8 file of at most `max_bytes` (never a FIFO,
    a device or a directory), else ConfigError naming the setting."""
    from llamactl.core.errors import FileRefusedError, FileTooLargeError
    from llamactl.core.files import open_regular

    try:
        with open_regular(path, max_bytes=max_bytes) as f:
            return f.read().decode("utf-8")
    except FileTooLargeError:
        raise ConfigError(f"{name} {path}: over max_schema_bytes ({max_bytes} bytes)") from None
    except FileRefusedError as exc:
        raise ConfigError(f"{name} {path}: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{name} {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{name} {path}: not UTF-8 text") from None


def chat_template(settings: Settings) -> str | None:
    """The template replacing the model's: `chat_template_file`'s text, else `chat_template`
    (`chatml`, llama-server's name for it, or Jinja text); None: keep the model's."""
    if settings.chat_template_file is not None:
        path = Path(settings.chat_template_file)
        try:
            return path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise ConfigError(f"chat template file {path}: {reason}") from None
    if settings.chat_template is None:
        return None
    from llamactl.engine.chat import CHATML_TEMPLATE

    return CHATML_TEMPLATE if settings.chat_template == "chatml" else settings.chat_template


def chat_template_kwargs(settings: Settings) -> dict[str, Any]:
    """`--chat-template-kwargs` as the variables it gives every chat (llama-server's flag:
    a JSON object); ConfigError when it is not one."""
    text = settings.chat_template_kwargs
    if text is None or not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"chat_template_kwargs is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ConfigError("chat_template_kwargs must be a JSON object, e.g. '{\"key\": 1}'")
    return value


def open_engine(settings: Settings, model_path: Path) -> ChatEngine:
    """Load the model at `model_path` and start its chat engine; the model is freed on failure."""
    from llamactl.core.errors import InvalidRequestError
    from llamactl.engine.engine import Engine as ChatEngine
    from llamactl.engine.model import Model
    from llamactl.engine.sampling import check_grammar

    grammar = default_grammar(settings)  # refused before the model loads
    model = Model(model_path, load=model_load(settings))
    try:
        if grammar is not None:
            try:
                check_grammar(model.vocab, grammar)
            except InvalidRequestError as exc:
                raise ConfigError(f"the default grammar: {exc}") from None
        return ChatEngine(model, engine_config(settings))
    except BaseException:
        model.close()
        raise
