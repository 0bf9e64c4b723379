"""The settings model: every setting once, with its type, default, bounds and help text.

A field is the whole definition of a setting. Its name is the config-file key and, upper-cased
after `LLAMACTL_`, the environment variable; a `Flag` marker makes it a command-line option of
the commands it names (the flag, the help text and the default shown in `--help` all come from
here); an `Engine` marker says which engine-config field it sets, so the one mapping in
`llamactl.engine_settings` picks it up with no code of its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, SkipValidation
from pydantic.dataclasses import dataclass as settings_dataclass
from pydantic.dataclasses import is_pydantic_dataclass
from pydantic.fields import FieldInfo

from llamactl.core import paths
from llamactl.core.endpoints import check_host_port
from llamactl.core.errors import ConfigError
from llamactl.engine.limits import DEFAULT_SLOT_CTX, MAX_DRAFT, physical_cores
from llamactl.engine.types import ReasoningFormat

from .interactive import INTERACTIVE

__all__ = [
    "CHAT",
    "ENGINE_COMMANDS",
    "ROUTER_PANEL",
    "SERVER_PANEL",
    "SERVE",
    "Engine",
    "Flag",
    "Settings",
    "Source",
    "SourceKind",
    "Weights",
    "setting_fields",
]

FlashAttn = Literal["auto", "on", "off"]
KvType = Literal["auto", "bf16", "f16", "q8_0"]
SourceKind = Literal["default", "file", "env", "cli"]

SERVE, CHAT = "serve", "chat"
ENGINE_COMMANDS = frozenset({SERVE, CHAT})  # the commands that build a chat engine
# A chat or Responses request that sets no answer limit gets this many tokens at most on
# `serve` (clients such as aider send none; a small model would write until the context fills).
SERVE_CHAT_ANSWER_TOKENS = 4096

# help panels of `llamactl serve` / `llamactl chat`
SERVER_PANEL = _SERVER = "Server"
_MODEL = "Model and engine"
_SAMPLING = "Sampling"
ROUTER_PANEL = _ROUTER = "Router: many models, one child process each"
_CACHE = "Prompt cache and checkpoints"
_SPEC = "Speculative decoding"
_LORA = "LoRA adapters (docs/serve.md, LoRA adapters)"
_EDGE = "HTTP edge: origins, hosts, body limits"
_LIMITS = "Request limits (docs/serve.md, Request limits)"
_SPEECH = "Speech limits (docs/transcribe.md, docs/api-realtime.md)"
_VOICE = "Speech models (docs/transcribe.md, docs/tts.md)"
_GPU = "GPU offload and memory (docs/serve.md, GPUs)"
_COMPAT = "llama-server compatibility (docs/serve.md, Moving from llama-server)"
_BOTH = ENGINE_COMMANDS


@dataclass(frozen=True)
class Flag:
    """A setting as a command-line option. `long` defaults to --kebab-name; `short` is left
    out on the commands in `no_short` (where the letter means something else)."""

    panel: str
    commands: frozenset[str] = ENGINE_COMMANDS
    short: str | None = None
    no_short: frozenset[str] = frozenset()
    long: str | None = None
    negatable: bool = True  # booleans: --x/--no-x
    repeatable: bool = False  # lists: the flag may be given several times (values joined)
    aliases: tuple[str, ...] = ()  # more spellings, e.g. llama-server's (--temp, --n-predict)
    bare_value: str | None = None  # the value when the flag is given alone (`-fa`: on)
    common: bool = False  # shown by `--help` (the rest by `--help-all`)
    shown_default: str | None = None  # when the default is not a plain value (None, computed)
    metavar: str | None = None


@dataclass(frozen=True)
class Engine:
    """The engine-config field a setting sets (`EngineConfig`, and `DecisionConfig` when it has
    the same field). `convert` turns the setting's value into the engine's; `model_ref` says
    the value names a model, resolved to its file like --model."""

    target: str
    convert: Callable[[Any], Any] | None = None
    model_ref: bool = False


@dataclass(frozen=True)
class Weights:
    """The `ModelLoad` field a setting sets (how llama.cpp places and maps the weights:
    GPU layers, mmap, mlock); `convert` as for `Engine`."""

    target: str
    convert: Callable[[Any], Any] | None = None


@dataclass(frozen=True)
class Source:
    """Where a setting's value came from; `detail` is the file:line, variable or flag."""

    kind: SourceKind
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.kind} ({self.detail})" if self.detail else self.kind


def _bookkeeping(**kwargs: Any) -> Any:
    """Not a setting: kept out of equality, repr and SETTING_NAMES."""
    return dataclasses.field(compare=False, repr=False, metadata={"internal": True}, **kwargs)


def _lora_scaled(items: list[str]) -> tuple[tuple[str, float], ...]:
    """`--lora-scaled` items, FNAME:SCALE (the scale follows the last ':'), as (path, scale)."""
    out: list[tuple[str, float]] = []
    for item in items:
        path, sep, scale = item.rpartition(":")
        try:
            value = float(scale)
        except ValueError:
            value = None
        if not sep or not path or value is None:
            raise ConfigError(f"lora_scaled: expected FNAME:SCALE, got {item!r}")
        out.append((path, value))
    return tuple(out)


def _no_limit(value: int | None) -> int | None:
    """-1 is llama-server's "no limit": the same as leaving the setting out on `serve`, and
    the way to lift the interactive commands' answer limit. 0 is refused, as the server
    refuses `max_tokens: 0` (OpenAI and Anthropic ask for at least one token): an answer of
    no token is not an answer."""
    if value == 0:
        raise ValueError("max_tokens must be -1 (no limit) or at least 1")
    return None if value == -1 else value


def _proportions(items: list[str]) -> tuple[float, ...]:
    """`--tensor-split 3,1` as llama.cpp's per-device proportions."""
    try:
        out = tuple(float(item) for item in items)
    except ValueError:
        raise ConfigError(
            f"tensor_split: expected numbers like 3,1, got {','.join(items)!r}"
        ) from None
    if any(not 0.0 <= v < float("inf") for v in out):
        raise ConfigError("tensor_split: proportions are numbers of at least 0")
    return out


def _rpc_servers(items: list[str]) -> list[str]:
    """`--rpc host1:50052,host2:50052`, each HOST:PORT (llama-server takes the same list)."""
    return [check_host_port(item.strip()) for item in items if item.strip()]


def _flash_on(value: str) -> bool:
    return value != "off"


@settings_dataclass
class Settings:
    """Every user-tunable setting. Build it with `load_settings`, not directly."""

    model: Annotated[
        str | None,
        Field(description="GGUF path, alias or name in the models dir."),
        Flag(
            _MODEL, common=True, short="-m", metavar="NAME|PATH", shown_default="embedded SmolLM2"
        ),
    ] = None
    hf_repo: Annotated[
        str | None,
        Field(
            description="Hugging Face model OWNER/REPO[:QUANT|:FILE], fetched into the models "
            "dir unless it is there (see `llamactl pull`)."
        ),
        Flag(_MODEL, common=True, short="-hf", metavar="REPO[:QUANT]", shown_default="none"),
    ] = None
    model_url: Annotated[
        str | None,
        Field(
            description="A GGUF to download at start into the models dir (<host>/<file>), "
            "unless an earlier start put it there."
        ),
        Flag(_MODEL, short="-mu", metavar="URL", shown_default="none"),
    ] = None
    models_dir: Annotated[Path, Field(description="Where model names are looked up.")] = Field(
        default_factory=paths.default_models_dir
    )
    aliases: Annotated[dict[str, str], Field(description="Short names for model files.")] = Field(
        default_factory=dict
    )
    n_ctx: Annotated[
        int,
        Field(
            ge=0,
            description="Total context over all slots; 0: the training context per slot "
            f"(at least {DEFAULT_SLOT_CTX}, less if memory is short).",
        ),
        Flag(_MODEL, common=True, short="-c", long="--ctx-size", metavar="N"),
        Engine("n_ctx"),
    ] = 0
    parallel: Annotated[
        int,
        Field(ge=1, description="Slots: requests decoded together."),
        Flag(_MODEL, common=True, commands=frozenset({SERVE}), short="-np"),
        Engine("n_parallel"),
    ] = 4
    threads: Annotated[
        int,
        Field(ge=1, description="Compute threads for generation."),
        Flag(_MODEL, common=True, short="-t", shown_default="physical cores"),
        Engine("n_threads"),
    ] = Field(default_factory=physical_cores)
    threads_batch: Annotated[
        int,
        Field(ge=0, description="Compute threads for prompts and batches; 0: as --threads."),
        Flag(_MODEL, short="-tb"),
        Engine("n_threads_batch"),
    ] = 0
    batch_size: Annotated[
        int,
        Field(ge=1, description="Logical batch: tokens per decode step."),
        Flag(_MODEL, short="-b"),
        Engine("n_batch"),
    ] = 512
    ubatch_size: Annotated[
        int,
        Field(ge=1, description="Physical batch: tokens per compute pass (at most --batch-size)."),
        Flag(_MODEL, short="-ub"),
        Engine("n_ubatch"),
    ] = 512
    temperature: Annotated[
        float,
        Field(ge=0.0, le=2.0, description="Sampling temperature; 0 is greedy."),
        Flag(_SAMPLING, common=True, commands=_BOTH, aliases=("--temp",), metavar="T"),
    ] = 0.8
    top_p: Annotated[
        float,
        Field(ge=0.0, le=1.0, description="Nucleus sampling threshold."),
        Flag(_SAMPLING, commands=_BOTH, metavar="P"),
    ] = 0.95
    top_k: Annotated[
        int,
        Field(ge=0, description="Sample among the K likeliest tokens; 0: all."),
        Flag(_SAMPLING, commands=_BOTH, metavar="K"),
    ] = 40
    min_p: Annotated[
        float,
        Field(ge=0.0, le=1.0, description="Drop tokens below this share of the top one."),
        Flag(_SAMPLING, commands=_BOTH, metavar="P"),
    ] = 0.05
    seed: Annotated[
        int | None,
        Field(description="Random seed, for reproducible sampling."),
        Flag(
            _SAMPLING,
            common=True,
            commands=_BOTH,
            short="-s",
            no_short=frozenset({CHAT}),
            metavar="N",
            shown_default="random",
        ),
    ] = None
    max_tokens: Annotated[
        int | None,
        Field(ge=-1, description="Stop an answer after N tokens; -1: no limit."),
        AfterValidator(_no_limit),
        Flag(
            _SAMPLING,
            common=True,
            commands=_BOTH,
            short="-n",
            aliases=("--n-predict", "--predict"),
            metavar="N",
            shown_default=(
                f"serve: {SERVE_CHAT_ANSWER_TOKENS} on chat and Responses, none elsewhere; "
                f"chat, tui: {INTERACTIVE.max_tokens}"
            ),
        ),
    ] = None
    repeat_penalty: Annotated[
        float,
        Field(
            gt=0.0,
            le=100.0,
            description="Penalise tokens seen in the last --repeat-last-n; 1: off.",
        ),
        Flag(
            _SAMPLING,
            commands=_BOTH,
            metavar="X",
            shown_default=f"serve: 1; chat, tui: {INTERACTIVE.repeat_penalty:g}",
        ),
    ] = 1.0
    repeat_last_n: Annotated[
        int,
        Field(ge=0, description="Tokens --repeat-penalty looks back over; 0: off."),
        Flag(_SAMPLING, commands=_BOTH, metavar="N"),
    ] = 64
    dry_multiplier: Annotated[
        float,
        Field(
            ge=0.0,
            description="DRY penalty on tokens extending a repeated sequence; 0: off.",
        ),
        Flag(
            _SAMPLING,
            commands=_BOTH,
            metavar="X",
            shown_default=f"serve: 0; chat, tui: {INTERACTIVE.dry_multiplier:g}",
        ),
    ] = 0.0
    dry_base: Annotated[
        float,
        Field(ge=1.0, description="DRY: the penalty grows as base^(length - allowed length)."),
        Flag(_SAMPLING, commands=_BOTH, metavar="X"),
    ] = 1.75
    dry_allowed_length: Annotated[
        int,
        Field(ge=0, description="DRY: repeated sequences up to this many tokens go unpenalised."),
        Flag(_SAMPLING, commands=_BOTH, metavar="N"),
    ] = 2
    dry_penalty_last_n: Annotated[
        int,
        Field(ge=0, description="DRY: tokens scanned for repetitions; 0: off."),
        Flag(_SAMPLING, commands=_BOTH, metavar="N"),
    ] = 64
    presence_penalty: Annotated[
        float,
        Field(ge=-2.0, le=2.0, description="Penalise every token already seen once; 0: off."),
        Flag(_SAMPLING, commands=_BOTH, metavar="X"),
    ] = 0.0
    frequency_penalty: Annotated[
        float,
        Field(ge=-2.0, le=2.0, description="Penalise tokens by how often they were seen; 0: off."),
        Flag(_SAMPLING, commands=_BOTH, metavar="X"),
    ] = 0.0
    grammar: Annotated[
        str | None,
        Field(description="GBNF grammar every answer follows unless a request asks for another."),
        Flag(_SAMPLING, commands=_BOTH, metavar="GBNF", shown_default="none"),
    ] = None
    grammar_file: Annotated[
        Path | None,
        Field(description="A file holding that grammar."),
        Flag(_SAMPLING, commands=_BOTH, metavar="FILE", shown_default="none"),
    ] = None
    json_schema: Annotated[
        str | None,
        Field(description="JSON schema every answer follows unless a request asks otherwise."),
        Flag(_SAMPLING, commands=_BOTH, short="-j", metavar="JSON", shown_default="none"),
    ] = None
    json_schema_file: Annotated[
        Path | None,
        Field(description="A file holding that JSON schema."),
        Flag(_SAMPLING, commands=_BOTH, short="-jf", metavar="FILE", shown_default="none"),
    ] = None
    system: Annotated[
        str | None,
        Field(description="System prompt."),
        Flag(_MODEL, common=True, commands=frozenset({CHAT}), short="-s"),
    ] = None
    host: Annotated[
        str,
        Field(
            description="Addresses to listen on, comma-separated; a path ending in .sock is a"
            " UNIX socket."
        ),
        Flag(_SERVER, common=True, commands=frozenset({SERVE})),
    ] = "127.0.0.1"
    api_prefix: Annotated[
        str,
        Field(description="Serve the whole API under this path, e.g. /llm (behind a proxy)."),
        Flag(_SERVER, commands=frozenset({SERVE}), metavar="PATH", shown_default="none"),
    ] = ""
    timeout: Annotated[
        float,
        Field(
            gt=0,
            description="Seconds a client may leave a response unread before its connection"
            " is dropped (llama-server's read/write timeout).",
        ),
        Flag(_SERVER, commands=frozenset({SERVE}), short="-to"),
    ] = 3600.0
    port: Annotated[
        int,
        Field(ge=0, le=65535, description="Port."),
        Flag(_SERVER, common=True, commands=frozenset({SERVE})),
    ] = 8080
    api_key: Annotated[
        list[str],
        Field(description="Accepted API key(s), comma-separated.", repr=False),  # never printed
        Flag(_SERVER, common=True, commands=frozenset({SERVE}), shown_default="none"),
    ] = Field(default_factory=list, repr=False)
    api_key_file: Annotated[
        Path | None,
        Field(description="File with one API key per line."),
        Flag(_SERVER, commands=frozenset({SERVE})),
    ] = None
    sse_ping_interval: Annotated[
        float,
        Field(ge=-1.0, description="Seconds of stream silence before a ping; -1 disables."),
        Flag(_SERVER, commands=frozenset({SERVE})),
    ] = 30.0
    webui: Annotated[
        bool,
        Field(description="Serve the chat page at / (docs/webui.md); its API calls need the key."),
        Flag(_SERVER, commands=frozenset({SERVE})),
    ] = True
    metrics: Annotated[
        bool,
        Field(description="Serve Prometheus /metrics."),
        Flag(_SERVER, commands=frozenset({SERVE}), negatable=False, shown_default="off"),
    ] = False
    max_queue: Annotated[
        int,
        Field(ge=0, description="Requests that may wait for a slot; 503 past it."),
        Flag(_SERVER, commands=frozenset({SERVE})),
        Engine("max_queue"),
    ] = 64
    alias: Annotated[
        str | None,
        Field(
            description="Model id reported by /v1/models; several, comma-separated, all name"
            " the model (the id is the first in sorted order, as llama-server picks it)."
        ),
        Flag(_MODEL, common=True, commands=frozenset({SERVE}), short="-a"),
    ] = None
    tags: Annotated[
        list[str],
        Field(description="Tags /v1/models lists for the model, comma-separated."),
        Flag(_COMPAT, commands=frozenset({SERVE}), shown_default="none"),
    ] = Field(default_factory=list)
    embedding: Annotated[
        bool,
        Field(
            description="Serve embeddings too (/v1/embeddings, /embedding): a second context"
            " of the model, with embeddings on."
        ),
        Flag(
            _COMPAT,
            commands=frozenset({SERVE}),
            negatable=False,
            aliases=("--embeddings",),
            shown_default="off",
        ),
    ] = False
    rerank: Annotated[
        bool,
        Field(
            description="Serve reranking (/v1/rerank, /rerank): the embedding context with"
            " rank pooling (the model needs a rank head); a model with no KV cache (BERT"
            " cross-encoders) serves only this and embeddings."
        ),
        Flag(
            _COMPAT,
            commands=frozenset({SERVE}),
            negatable=False,
            aliases=("--reranking",),
            shown_default="off",
        ),
    ] = False
    pooling: Annotated[
        Literal["none", "mean", "cls", "last", "rank"] | None,
        Field(description="Embedding pooling: none, mean, cls, last or rank."),
        Flag(_COMPAT, commands=frozenset({SERVE}), shown_default="the model's"),
    ] = None
    embd_normalize: Annotated[
        int,
        Field(
            ge=-1,
            description="Embedding normalization: -1 none, 0 max-abs (int16), 1 taxicab,"
            " 2 euclidean, p > 2 the p-norm.",
        ),
        Flag(_COMPAT, commands=frozenset({SERVE})),
    ] = 2
    max_embedding_inputs: Annotated[
        int,
        Field(
            ge=1,
            description="Most inputs in one embeddings request (/v1/embeddings, /embedding) or"
            " documents in one rerank request; 400 past it. OpenAI's limit; each input is a"
            " decode of its own (~15 ms for the embedded model on 2 cores): ~30 s for 2048.",
        ),
        Flag(_LIMITS, commands=frozenset({SERVE})),
    ] = 2048
    max_embedding_tokens: Annotated[
        int,
        Field(
            ge=1,
            description="Most tokens in one embeddings or rerank request (all its inputs, every"
            " query + document pair); 400 past it. ~5 ms a token for the embedded model on 2"
            " cores: ~21 s for 4096, and under a minute with 2048 inputs (OpenAI allows 300k).",
        ),
        Flag(_LIMITS, commands=frozenset({SERVE})),
    ] = 4096
    media_path: Annotated[
        Path | None,
        Field(
            description="Directory of local media files: chat requests may name an image or"
            " audio file in it as file://RELATIVE-PATH; none: file:// URLs are refused."
        ),
        Flag(_COMPAT, commands=frozenset({SERVE}), shown_default="none", metavar="DIR"),
    ] = None
    max_media_file_mib: Annotated[
        int,
        Field(
            ge=1,
            description="Largest --media-path file a request may name, in MiB (its size is read"
            " before the file is); 400 past it.",
        ),
        Flag(_LIMITS, commands=frozenset({SERVE})),
    ] = 64
    strict_model_names: Annotated[
        bool,
        Field(
            description="Refuse requests naming another model (400); by default any name is"
            " answered by the one model, as llama-server does."
        ),
        Flag(_COMPAT, commands=frozenset({SERVE}), negatable=False, shown_default="off"),
    ] = False
    slots: Annotated[
        bool,
        Field(description="Serve GET /slots (each slot's state)."),
        Flag(_COMPAT, commands=frozenset({SERVE})),
    ] = True
    slots_content: Annotated[
        bool,
        Field(
            description="GET /slots also shows each slot's prompt, generated text and grammar"
            " (any client could read another's conversation); off: counts and parameters only."
        ),
        Flag(_COMPAT, commands=frozenset({SERVE}), negatable=False, shown_default="off"),
    ] = False
    props: Annotated[
        bool,
        Field(description="Allow POST /props (GET /props is always served)."),
        Flag(_COMPAT, commands=frozenset({SERVE}), negatable=False, shown_default="off"),
    ] = False
    jinja: Annotated[
        bool,
        Field(
            description="Chat templates are always rendered with Jinja; --no-jinja is accepted"
            " for llama-server command lines and changes nothing."
        ),
        Flag(_COMPAT, commands=frozenset({SERVE})),
    ] = True
    cont_batching: Annotated[
        bool,
        Field(
            description="Batching is always continuous; accepted for llama-server command"
            " lines (--no-cont-batching changes nothing)."
        ),
        Flag(_COMPAT, commands=frozenset({SERVE}), short="-cb"),
    ] = True
    n_gpu_layers: Annotated[
        int,
        Field(
            ge=-1,
            description="Layers to offload to the GPU; -1: all (a CPU-only build keeps them on"
            " the CPU, with a note).",
        ),
        Flag(
            _GPU,
            common=True,
            short="-ngl",
            aliases=("--gpu-layers",),
            metavar="N",
            shown_default="-1 (all)",
        ),
        Weights("n_gpu_layers"),
    ] = -1
    split_mode: Annotated[
        Literal["none", "layer", "row"],
        Field(description="How to split the model over several GPUs: none, layer or row."),
        Flag(_GPU, short="-sm", metavar="none|layer|row"),
        Weights("split_mode"),
    ] = "layer"
    main_gpu: Annotated[
        int,
        Field(ge=0, description="The GPU for the whole model with --split-mode none."),
        Flag(_GPU, short="-mg", metavar="N"),
        Weights("main_gpu"),
    ] = 0
    tensor_split: Annotated[
        list[str],
        Field(description="Share of the model per GPU, comma-separated proportions, e.g. 3,1."),
        Flag(_GPU, short="-ts", metavar="N0,N1,...", shown_default="even"),
        Weights("tensor_split", convert=_proportions),
    ] = Field(default_factory=list)
    rpc: Annotated[
        list[str],
        AfterValidator(_rpc_servers),
        Field(
            description="llama.cpp rpc-servers on other hosts to spread the model over, as"
            " llama-server's --rpc (needs llama-cpp-python built with GGML_RPC=ON)."
        ),
        Flag(_GPU, metavar="HOST:PORT,...", shown_default="none"),
        Weights("rpc_servers", convert=tuple),
    ] = Field(default_factory=list)
    mlock: Annotated[
        bool,
        Field(description="Keep the model in RAM (no swapping out)."),
        Flag(_GPU, negatable=False, shown_default="off"),
        Weights("use_mlock"),
    ] = False
    mmap: Annotated[
        bool,
        Field(description="Map the model file instead of reading it in (--no-mmap reads it)."),
        Flag(_GPU),
        Weights("use_mmap"),
    ] = True
    repack: Annotated[
        bool,
        Field(
            description="Repack weights for llama.cpp's faster CPU kernels (llama.cpp's default;"
            " outputs then vary with batching: off keeps them exact)."
        ),
        Flag(_GPU),
        Weights("repack"),
    ] = False
    kv_unified: Annotated[
        bool,
        Field(description="One KV buffer for all slots (outputs then vary with load)."),
        Flag(_MODEL),
        Engine("kv_unified"),
    ] = False
    flash_attn: Annotated[
        FlashAttn,
        Field(description="Flash attention: auto, on or off."),
        Flag(_MODEL, short="-fa", metavar="on|off|auto", bare_value="on"),
        Engine("flash_attn", convert=_flash_on),
    ] = "on"
    cache_type: Annotated[
        KvType,
        Field(
            description="KV cache type: auto (f16, outputs independent of batching; bf16 for"
            " recurrent and hybrid models), bf16, f16 or q8_0."
        ),
        Flag(_CACHE, short="-ctk"),
        Engine("kv_type"),
    ] = "auto"
    # Prompt cache, checkpoints, speculative decoding
    cache_ram: Annotated[
        int | None,
        Field(ge=-1, description="RAM prompt cache in MiB; -1: no limit; 0: off."),
        Flag(_CACHE, short="-cram", shown_default="8192; decision models: off"),
        Engine("cache_ram_mib"),
    ] = None
    cache_prompt: Annotated[
        bool,
        Field(description="Reuse a slot's or the RAM cache's prompt prefix (off: decode all)."),
        Flag(_CACHE, commands=frozenset({SERVE})),
        Engine("cache_prompt"),
    ] = True
    cache_idle_slots: Annotated[
        bool,
        Field(description="Save an idle slot's prompt to the cache before a new request takes it."),
        Flag(_CACHE),
        Engine("cache_idle_slots"),
    ] = True
    cache_persist: Annotated[
        Path | None,
        Field(
            description="Keep the prompt cache in DIR across restarts: written on shutdown and"
            " every 60 s, read at start (beyond llama-server)."
        ),
        Flag(_CACHE, commands=frozenset({SERVE}), metavar="DIR"),
        Engine("cache_persist_dir"),
    ] = None
    slot_save_path: Annotated[
        Path | None,
        Field(description="Directory of POST /slots/{id}?action=save|restore files."),
        Flag(_CACHE, commands=frozenset({SERVE}), metavar="DIR"),
    ] = None
    slot_save_quota_mib: Annotated[
        int,
        Field(
            ge=1,
            description="Most MiB of files in --slot-save-path; a slot save past it is a 400"
            " (a save over a file of the same name counts once).",
        ),
        Flag(_CACHE, commands=frozenset({SERVE})),
    ] = 4096
    slot_save_max_files: Annotated[
        int,
        Field(ge=1, description="Most files in --slot-save-path; a save past it is a 400."),
        Flag(_CACHE, commands=frozenset({SERVE})),
    ] = 1024
    slot_prompt_similarity: Annotated[
        float,
        Field(
            ge=0.0,
            le=1.0,
            description="Reuse the idle slot sharing more than this share of a prompt; 0: LRU.",
        ),
        Flag(_CACHE, short="-sps"),
        Engine("slot_prompt_similarity"),
    ] = 0.10
    cache_reuse: Annotated[
        int,
        Field(
            ge=0,
            description="Shift cached chunks of at least N tokens past the common prefix into"
            " place instead of decoding them (llama-server's; inexact: shifted RoPE); 0: off.",
        ),
        Flag(_CACHE, metavar="N"),
        Engine("cache_reuse"),
    ] = 0
    ctx_checkpoints: Annotated[
        int,
        Field(ge=0, description="Checkpoints per slot for hybrid/recurrent/SWA models."),
        Flag(_CACHE, short="-ctxcp"),
        Engine("ctx_checkpoints"),
    ] = 32
    checkpoint_min_step: Annotated[
        int,
        Field(ge=0, description="Tokens between checkpoints, the last user message aside."),
        Flag(_CACHE, short="-cms"),
        Engine("checkpoint_min_step"),
    ] = 8192
    spec_type: Annotated[
        list[str],
        Field(
            description="Speculators, comma-separated: ngram-simple, ngram-mod, ngram-cache, "
            "draft-simple."
        ),
        Flag(_SPEC),
        Engine("spec_types", convert=tuple),
    ] = Field(default_factory=list)
    model_draft: Annotated[
        str | None,
        Field(description="Draft model for draft-simple (same vocabulary as --model)."),
        Flag(_SPEC, short="-md"),
        Engine("model_draft", model_ref=True),
    ] = None
    spec_draft_n_max: Annotated[
        int,
        Field(
            ge=1,
            description=f"Most tokens per draft (capped at {MAX_DRAFT}: a draft and its row "
            "stay in one flash-attention kernel).",
        ),
        AfterValidator(lambda n: min(n, MAX_DRAFT)),
        Flag(_SPEC),
        Engine("spec_draft_n_max"),
    ] = 3
    spec_draft_n_min: Annotated[
        int,
        Field(ge=0, le=MAX_DRAFT, description="Shorter drafts are dropped."),
        Flag(_SPEC),
        Engine("spec_draft_n_min"),
    ] = 0
    spec_draft_p_min: Annotated[
        float,
        Field(ge=0.0, le=1.0, description="Draft model: stop drafting below this probability."),
        Flag(_SPEC),
        Engine("spec_draft_p_min"),
    ] = 0.0
    spec_ngram_mod_n_match: Annotated[
        int,
        Field(ge=1, le=1024, description="ngram-mod: tokens of the n-gram looked up."),
        Flag(_SPEC),
        Engine("spec_ngram_mod_n_match"),
    ] = 24
    spec_ngram_mod_n_min: Annotated[
        int,
        Field(ge=1, le=1024, description="ngram-mod: shorter drafts are not made."),
        Flag(_SPEC),
        Engine("spec_ngram_mod_n_min"),
    ] = 48
    spec_ngram_mod_n_max: Annotated[
        int,
        Field(
            ge=1, le=1024, description=f"ngram-mod: most tokens per draft (at most {MAX_DRAFT})."
        ),
        Flag(_SPEC),
        Engine("spec_ngram_mod_n_max"),
    ] = 64
    # LoRA adapters (llama-server's --lora, --lora-scaled, --lora-init-without-apply)
    lora: Annotated[
        list[str],
        Field(description="LoRA adapter GGUF(s) at scale 1; repeat the flag or comma-separate."),
        Flag(_LORA, repeatable=True, metavar="FNAME", shown_default="none"),
        Engine("lora", convert=tuple),
    ] = Field(default_factory=list)
    lora_scaled: Annotated[
        list[str],
        Field(description="LoRA adapter GGUF(s) with their scale: FNAME:SCALE, comma-separated."),
        Flag(_LORA, repeatable=True, metavar="FNAME:SCALE,...", shown_default="none"),
        Engine("lora_scaled", convert=_lora_scaled),
    ] = Field(default_factory=list)
    lora_init_without_apply: Annotated[
        bool,
        Field(description="Load the LoRA adapters at scale 0 (set them with POST /lora-adapters)."),
        Flag(_LORA, negatable=False, shown_default="off"),
        Engine("lora_init_without_apply"),
    ] = False
    chat_template_file: Annotated[
        Path | None,
        Field(description="Jinja file replacing the model's template."),
        Flag(_MODEL, common=True),
    ] = None
    chat_template: Annotated[
        str | None,
        Field(
            description="A template replacing the model's: a llama.cpp built-in name (chatml,"
            " llama3, gemma, mistral-v7, ...) or Jinja text; --chat-template-file wins."
        ),
        Flag(_MODEL, metavar="NAME|JINJA"),
    ] = None
    reasoning: Annotated[
        Literal["on", "off", "auto"],
        Field(
            description="Whether chats reason when a request does not say: on, off, or auto"
            " (the template's default)."
        ),
        Flag(_COMPAT, commands=frozenset({SERVE}), short="-rea"),
    ] = "auto"
    reasoning_budget: Annotated[
        int,
        Field(
            ge=-1,
            description="Reasoning tokens a chat may use when a request does not say; -1: no"
            " limit.",
        ),
        Flag(_COMPAT, commands=frozenset({SERVE})),
    ] = -1
    reasoning_format: Annotated[
        ReasoningFormat,
        Field(
            description="Where a chat's reasoning goes when a request does not say: auto or"
            " deepseek (reasoning_content), none (left in content, tags and all),"
            " deepseek-legacy (both)."
        ),
        Flag(_COMPAT, commands=frozenset({SERVE})),
    ] = "auto"
    chat_template_kwargs: Annotated[
        str | None,
        Field(
            description="A JSON object of chat-template variables for every request (a"
            " request's own chat_template_kwargs win), e.g. '{\"enable_thinking\": false}'."
        ),
        Flag(_COMPAT, commands=frozenset({SERVE}), metavar="JSON"),
    ] = None
    # Router mode (`serve --models-dir/--models-preset`): many models, each in a child process
    models_preset: Annotated[
        Path | None,
        Field(description="Router mode: TOML file of named models with their own settings."),
        Flag(_ROUTER, commands=frozenset({SERVE})),
    ] = None
    models_max: Annotated[
        int,
        Field(
            ge=0,
            description="Models loaded at once; the least recently used is unloaded; 0: no limit.",
        ),
        Flag(_ROUTER, commands=frozenset({SERVE})),
    ] = 4
    models_autoload: Annotated[
        bool,
        Field(description="Load a model on its first request; ?autoload= overrides per request."),
        Flag(_ROUTER, commands=frozenset({SERVE})),
    ] = True
    sleep_idle_seconds: Annotated[
        float,
        Field(ge=-1.0, description="Unload a model idle this many seconds; -1: never."),
        Flag(_ROUTER, commands=frozenset({SERVE})),
    ] = -1.0
    # Speech in (`transcribe`, /v1/audio/transcriptions, /v1/realtime)
    transcribe_model: Annotated[
        str | None,
        Field(description="Speech model; none: the embedded Whisper tiny.en."),
        Flag(_VOICE, commands=frozenset({SERVE}), metavar="NAME|PATH", shown_default="tiny.en"),
    ] = None
    transcribe_mmproj: Annotated[
        Path | None,
        Field(description="Audio projector of a llama.cpp speech .gguf."),
        Flag(_VOICE, commands=frozenset({SERVE}), metavar="FILE", shown_default="none"),
    ] = None
    transcribe_threads: Annotated[
        int,
        Field(
            ge=0, description="Speech model threads; 0: as the threads setting (physical cores)."
        ),
    ] = 0
    # Speech out (`tts`, /tts, /v1/audio/speech, realtime answers); None: eSpeak NG
    tts_model: Annotated[
        Path | None,
        Field(description="A llama.cpp TTS backbone .gguf (with --tts-mmproj)."),
        Flag(_VOICE, commands=frozenset({SERVE}), metavar="FILE", shown_default="eSpeak NG"),
    ] = None
    tts_mmproj: Annotated[
        Path | None,
        Field(description="The TTS backbone's mmproj holding the audio generator."),
        Flag(_VOICE, commands=frozenset({SERVE}), metavar="FILE", shown_default="none"),
    ] = None
    # Speech limits (hardening): what one upload or one realtime session may hold
    max_audio_seconds: Annotated[
        float,
        Field(ge=1.0, description="Longest transcription upload, in seconds of audio."),
        Flag(_SPEECH, commands=frozenset({SERVE})),
    ] = 3600.0
    max_audio_upload_mib: Annotated[
        int,
        Field(ge=1, description="Largest transcription upload in MiB; 413 past it."),
        Flag(_SPEECH, commands=frozenset({SERVE})),
    ] = 64
    realtime_max_buffer_seconds: Annotated[
        float,
        Field(ge=60.0, description="Input audio a realtime session may hold untranscribed."),
        Flag(_SPEECH, commands=frozenset({SERVE})),
    ] = 1200.0
    realtime_max_sessions: Annotated[
        int,
        Field(ge=1, description="Realtime connections served at once."),
        Flag(_SPEECH, commands=frozenset({SERVE})),
    ] = 32
    # Request limits (serve): work that grows with a request is bounded; over a limit is a 400
    max_messages: Annotated[
        int,
        Field(ge=1, description="Most chat messages / Responses input items per request."),
        Flag(_LIMITS, commands=frozenset({SERVE})),
    ] = 4096
    max_stop_strings: Annotated[
        int,
        Field(ge=0, description="Most stop strings per request."),  # OpenAI 4, llama-server any
        Flag(_LIMITS, commands=frozenset({SERVE})),
    ] = 32
    max_stop_length: Annotated[
        int,
        Field(ge=1, description="Longest stop string, in characters."),
        Flag(_LIMITS, commands=frozenset({SERVE})),
    ] = 512
    max_tools: Annotated[
        int,
        Field(ge=0, description="Most tools per request."),  # OpenAI's limit
        Flag(_LIMITS, commands=frozenset({SERVE})),
    ] = 128
    max_schema_bytes: Annotated[
        int,
        Field(ge=1, description="Largest JSON schema or GBNF grammar, in bytes."),
        Flag(_LIMITS, commands=frozenset({SERVE})),
    ] = 262144
    max_schema_depth: Annotated[
        int,
        Field(ge=1, description="Deepest nesting in a JSON schema."),
        Flag(_LIMITS, commands=frozenset({SERVE})),
    ] = 64
    max_json_values: Annotated[
        int,
        Field(ge=1, description="Most JSON values in a body over 1 MiB; 413 past it."),
        Flag(_LIMITS, commands=frozenset({SERVE})),
    ] = 262144
    max_tokenize_bytes: Annotated[
        int,
        Field(
            ge=1,
            description="Largest text /tokenize takes, in UTF-8 bytes (its answer holds up to a "
            "token per byte); 400 past it.",
        ),
        Flag(_LIMITS, commands=frozenset({SERVE})),
    ] = 1048576
    max_media: Annotated[
        int,
        Field(ge=1, description="Most images and audio clips in one chat request."),
        Flag(_LIMITS, commands=frozenset({SERVE})),
    ] = 16
    max_media_pixels: Annotated[
        int,
        Field(
            ge=1,
            description="Most image pixels in one chat request, read from the images' headers "
            "before decoding (each pixel decodes to 3 bytes; projectors downscale anyway).",
        ),
        Flag(_LIMITS, commands=frozenset({SERVE})),
    ] = 33554432
    # HTTP edge (serve): who may call, how much a request may send (docs/serve.md, Security)
    cors_origins: Annotated[
        list[str],
        Field(
            description="Web origins allowed to call, comma-separated: localhost (pages on this "
            "machine), * (any) or scheme://host[:port]."
        ),
        Flag(_EDGE, commands=frozenset({SERVE})),
    ] = Field(default_factory=lambda: ["localhost"])
    allowed_hosts: Annotated[
        list[str],
        Field(
            description="Host names answered besides loopback ones, comma-separated; * answers any."
        ),
        Flag(
            _EDGE,
            commands=frozenset({SERVE}),
            shown_default="none: loopback names only when bound to loopback",
        ),
    ] = Field(default_factory=list)
    max_body_size: Annotated[
        int,
        Field(ge=1, description="Largest request body in MiB; 413 past it."),
        Flag(_EDGE, commands=frozenset({SERVE})),
    ] = 32
    body_timeout: Annotated[
        float,
        Field(ge=0.1, description="Seconds to receive a whole request body; 408 past it."),
        Flag(_EDGE, commands=frozenset({SERVE})),
    ] = 60.0
    header_timeout: Annotated[
        float,
        Field(
            ge=0.1,
            description="Seconds a connection has to send its request line and headers; "
            "408 and closed past it.",
        ),
        Flag(_EDGE, commands=frozenset({SERVE})),
    ] = 10.0
    max_connections: Annotated[
        int,
        Field(
            ge=1,
            description="Client connections held at once; past it a new one replaces the "
            "longest idle, or gets 503 when all are busy.",
        ),
        Flag(_EDGE, commands=frozenset({SERVE})),
    ] = 1024
    shutdown_grace: Annotated[
        float,
        Field(
            ge=0.0,
            description="On SIGTERM or Ctrl-C, seconds running generations may finish; queued "
            "ones end at once, a second signal ends all.",
        ),
        Flag(_SERVER, commands=frozenset({SERVE})),
    ] = 10.0
    # Bookkeeping, not settings: the file that was read (None if there was none) and where
    # each setting's value came from.
    config_file: Annotated[Path | None, SkipValidation] = _bookkeeping(default=None)
    sources: Annotated[dict[str, Source], SkipValidation] = _bookkeeping(default_factory=dict)

    def explain(self) -> list[tuple[str, Any, Source]]:
        """(name, value, source) for every setting, in declaration order."""
        return [
            (name, getattr(self, name), self.sources.get(name, Source("default")))
            for name in SETTING_NAMES
        ]

    def chat_answer_limit(self) -> int | None:
        """The answer limit of a served chat or Responses request that sets none: the
        max_tokens setting when given (-1: None, no limit), else SERVE_CHAT_ANSWER_TOKENS."""
        if self.max_tokens is not None:
            return self.max_tokens
        if self.sources.get("max_tokens", Source("default")).kind != "default":
            return None  # -1 was asked for
        return SERVE_CHAT_ANSWER_TOKENS

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


def setting_fields() -> dict[str, FieldInfo]:
    """Each setting's pydantic field (annotation, bounds, Flag / Engine markers, description)
    by name, the bookkeeping fields included."""
    cls: type[Any] = Settings
    if not is_pydantic_dataclass(cls):  # the TypeGuard types the attribute the decorator adds
        raise TypeError("Settings is not a pydantic dataclass")
    return cls.__pydantic_fields__
