"""llama-server's flags that `llamactl serve` has no option of its own for: the translation table.

A llama-server command line starts `llamactl serve` unchanged. Every flag llama-server b11434
lists (its `tools/server/README.md`) is either one of serve's own options (same name, short form
and meaning: `llamactl.config.fields`) or an entry here, which says what llamactl does with it:

- `sets`: another spelling of a serve option or setting (`-ctv q8_0` sets the one KV type,
  `-nocb` is `--no-cont-batching`);
- `note`: accepted, changing nothing here (thread placement, GPU placement on a CPU build,
  logging styles, the web UI's own options); a one-line note on stderr says why;
- `refuse`: a flag that would change the answers and that llamactl does not implement (other
  samplers, RoPE overrides, control vectors, downloads from a URL): a clear error, exit 2,
  rather than a server that silently answers otherwise than asked.

The entries are hidden from `--help` (docs/serve.md, Moving from llama-server, lists them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["GIVEN", "LLAMA_SERVER_FLAGS", "ServerFlag"]

GIVEN: Any = object()  # `sets` with the value the user gave


@dataclass(frozen=True)
class ServerFlag:
    spellings: tuple[str, ...]  # every spelling llama-server accepts, the usual one first
    takes_value: bool
    action: Literal["sets", "note", "refuse"]
    text: str = ""  # the note, or why it is refused
    target: str = ""  # `sets`: a setting or one of serve's own parameters
    value: Any = GIVEN  # `sets`: the value it stands for (a switch), else the one given
    join: str = ""  # `sets`: appended to the target's own value after this separator

    @property
    def name(self) -> str:
        return "/".join(self.spellings)


def _sets(spellings: str, target: str, value: Any = GIVEN, text: str = "") -> ServerFlag:
    return ServerFlag(tuple(spellings.split()), value is GIVEN, "sets", text, target, value)


def _note(spellings: str, text: str, takes_value: bool = False) -> ServerFlag:
    return ServerFlag(tuple(spellings.split()), takes_value, "note", text)


def _refuse(spellings: str, text: str, takes_value: bool = False) -> ServerFlag:
    return ServerFlag(tuple(spellings.split()), takes_value, "refuse", text)


_PLACEMENT = "thread placement and priority are left to the OS here"
_GPU = "llamactl places layers with --n-gpu-layers/--tensor-split; ignored"
_LOGS = "llamactl's log has its own format (--log-format); ignored"
_UI = "llamactl has no built-in agent tools or MCP proxy; ignored"
_DRAFT = "the draft model shares the target's threads, devices and KV type here; ignored"
_SAMPLER = (
    "llamactl samples with temperature, top-k, top-p, min-p, repetition, presence, frequency "
    "and DRY penalties only; this sampler would change the answers, so it is refused"
)
_DOWNLOAD = (
    "llamactl downloads a model at start only with -hf OWNER/REPO or -mu URL; fetch this "
    "one with `llamactl pull` or a download of your own and pass its path"
)
_REMOVED = "llama-server b11434 removed this flag too"

LLAMA_SERVER_FLAGS: tuple[ServerFlag, ...] = (
    # --- other spellings of serve's options
    _sets("--cache-type-k", "cache_type"),
    _sets(
        "-ctv --cache-type-v",
        "cache_type",
        text="llamactl keeps keys and values in one KV type (--cache-type)",
    ),
    _sets("-hfr", "hf_repo"),
    ServerFlag(("-hff", "--hf-file"), True, "sets", "", "hf_repo", join=":"),
    _sets("--log-verbose", "verbose", True),
    _sets("--log-disable", "log_level", "error"),
    _sets("--log-jsonl", "log_format", "json"),
    _sets("--no-log-jsonl", "log_format", "text"),
    _sets("--swa-checkpoints", "ctx_checkpoints"),
    _sets("-kvu", "kv_unified", True),
    _sets("-no-kvu", "kv_unified", False),
    _sets("-nocb", "cont_batching", False),
    _sets("-nr", "repack", False),
    _sets("-mm", "mmproj"),
    _sets("--spec-draft-model", "model_draft"),
    _sets("--draft-p-min", "spec_draft_p_min"),
    # --- accepted, with a note
    _sets("--ui", "webui", True),
    _sets("--no-ui", "webui", False),
    _note("-hft --hf-token", "`llamactl pull` and -hf read HF_TOKEN from the environment", True),
    _note("-C --cpu-mask", _PLACEMENT, takes_value=True),
    _note("-Cr --cpu-range", _PLACEMENT, takes_value=True),
    _note("--cpu-strict", _PLACEMENT, takes_value=True),
    _note("--prio", _PLACEMENT, takes_value=True),
    _note("--poll", _PLACEMENT, takes_value=True),
    _note("-Cb --cpu-mask-batch", _PLACEMENT, takes_value=True),
    _note("-Crb --cpu-range-batch", _PLACEMENT, takes_value=True),
    _note("--cpu-strict-batch", _PLACEMENT, takes_value=True),
    _note("--prio-batch", _PLACEMENT, takes_value=True),
    _note("--poll-batch", _PLACEMENT, takes_value=True),
    _note("--numa", _PLACEMENT, takes_value=True),
    _note(
        "--keep",
        "llamactl never shifts the context (a prompt past it is refused), so there is "
        "nothing to keep",
        takes_value=True,
    ),
    _note("--no-context-shift", "llamactl never shifts the context; this is its behaviour"),
    _note(
        "--context-shift",
        "llamactl never shifts the context: a request past it gets the API's context-length "
        "error, so the client can compact",
    ),
    _note(
        "--swa-full",
        "sliding-window prompts are reused by trimming and checkpoints; the window-sized cache "
        "is kept",
    ),
    _note("--perf --no-perf", "llamactl reports timings in every answer; ignored"),
    _note("-e --escape --no-escape", "escapes only concern llama-cli's prompt; ignored"),
    _note("-kvo --kv-offload -nkvo --no-kv-offload", _GPU),
    _note("--no-host", _GPU),
    _note("--op-offload --no-op-offload", _GPU),
    _note("-dev --device", _GPU, takes_value=True),
    _note("-ot --override-tensor", _GPU, takes_value=True),
    _note("-cmoe --cpu-moe", _GPU),
    _note("-ncmoe --n-cpu-moe", _GPU, takes_value=True),
    _note("-ncffn --n-cpu-ffn", _GPU, takes_value=True),
    _note("-fit --fit", _GPU, takes_value=True),
    _note("-fitt --fit-target", _GPU, takes_value=True),
    _note("-fitc --fit-ctx", _GPU, takes_value=True),
    _note("-mmdev --mmproj-device", _GPU, takes_value=True),
    _note("-dt --defrag-thold", "deprecated in llama-server; ignored", takes_value=True),
    _note("-lm --load-mode", "use --mmap/--no-mmap; ignored", takes_value=True),
    _note("-lzm --lazy-mode", "tensors are read as llama.cpp maps them; ignored", takes_value=True),
    _note("--check-tensors", "llamactl checks a GGUF's header and sizes at load; ignored"),
    _note("--log-colors", _LOGS, takes_value=True),
    _note("--log-prefix --no-log-prefix", _LOGS),
    _note("--log-timestamps --no-log-timestamps", _LOGS),
    _note("-lv --verbosity --log-verbosity", "use --log-level; ignored", takes_value=True),
    _note("--offline", "llamactl fetches nothing at start unless -hf names a missing model"),
    _note("-bs --backend-sampling", "sampling runs on the CPU here; ignored"),
    _note(
        "--kv-unified-per-slot", "each slot's context is -c / -np here; ignored", takes_value=True
    ),
    _note("--warmup --no-warmup", "llamactl runs no warmup decode; ignored"),
    _note("--mmproj-auto --no-mmproj-auto", "the mmproj is --mmproj, or --no-mmproj; ignored"),
    _note("--image-min-tokens", "the projector's own image sizes are used", takes_value=True),
    _note("--image-max-tokens", "the projector's own image sizes are used", takes_value=True),
    _note("--mtmd-batch-max-tokens", "images are encoded one at a time", takes_value=True),
    _note("--video-fps", "llamactl takes no video input", takes_value=True),
    _note("--video-timestamp-interval", "llamactl takes no video input", takes_value=True),
    _note("--video-ffmpeg-dir", "llamactl takes no video input", takes_value=True),
    _note("--reuse-port", "use --listen-fd to share a socket; ignored"),
    _note("--path", "llamactl serves no static files; ignored", takes_value=True),
    _note("--cors-methods", "llamactl allows the methods its API uses", takes_value=True),
    _note("--cors-headers", "llamactl allows the headers its API reads", takes_value=True),
    _note("--cors-credentials --no-cors-credentials", "see --cors-origins; ignored"),
    _note("--ui-config --webui-config", "the page keeps its settings in the browser", True),
    _note(
        "--ui-config-file --webui-config-file", "the page keeps its settings in the browser", True
    ),
    _note("--ui-mcp-proxy --webui-mcp-proxy --no-ui-mcp-proxy --no-webui-mcp-proxy", _UI),
    _note("--tools", _UI, takes_value=True),
    _note("--tools-runtime", _UI, takes_value=True),
    _note("--mcp-servers-config", _UI, takes_value=True),
    _note("--mcp-servers-json", _UI, takes_value=True),
    _note("-ag --agent -no-ag --no-agent", _UI),
    _note("--threads-http", "HTTP runs on one event loop, off the decode thread", takes_value=True),
    _note("--reasoning-effort", "ask for it per request (reasoning_effort)", takes_value=True),
    _note(
        "--reasoning-budget-message",
        "a reasoning budget ends the block without a message here",
        takes_value=True,
    ),
    _note("--reasoning-preserve --no-reasoning-preserve", "the template decides; ignored"),
    _note("--skip-chat-parsing --no-skip-chat-parsing", "use --reasoning-format none; ignored"),
    _note("--prefill-assistant --no-prefill-assistant", "a last assistant message is continued"),
    _note("--log-prompts-dir", "use --log-level debug; ignored", takes_value=True),
    _note("--spec-draft-hf -hfd -hfrd --hf-repo-draft", _DRAFT, takes_value=True),
    _note("--spec-draft-threads -td --threads-draft", _DRAFT, takes_value=True),
    _note("--spec-draft-threads-batch -tbd --threads-batch-draft", _DRAFT, takes_value=True),
    _note("--spec-draft-cpu-mask -Cd --cpu-mask-draft", _PLACEMENT, takes_value=True),
    _note("--spec-draft-cpu-range -Crd --cpu-range-draft", _PLACEMENT, takes_value=True),
    _note("--spec-draft-cpu-strict --cpu-strict-draft", _PLACEMENT, takes_value=True),
    _note("--spec-draft-prio --prio-draft", _PLACEMENT, takes_value=True),
    _note("--spec-draft-poll --poll-draft", _PLACEMENT, takes_value=True),
    _note("--spec-draft-cpu-mask-batch -Cbd --cpu-mask-batch-draft", _PLACEMENT, takes_value=True),
    _note("--spec-draft-cpu-strict-batch --cpu-strict-batch-draft", _PLACEMENT, takes_value=True),
    _note("--spec-draft-prio-batch --prio-batch-draft", _PLACEMENT, takes_value=True),
    _note("--spec-draft-poll-batch --poll-batch-draft", _PLACEMENT, takes_value=True),
    _note("--spec-draft-override-tensor -otd --override-tensor-draft", _DRAFT, takes_value=True),
    _note("--spec-draft-cpu-moe -cmoed --cpu-moe-draft", _DRAFT),
    _note(
        "--spec-draft-n-cpu-moe --spec-draft-ncmoe -ncmoed --n-cpu-moe-draft",
        _DRAFT,
        takes_value=True,
    ),
    _note("--spec-draft-type-k -ctkd --cache-type-k-draft", _DRAFT, takes_value=True),
    _note("--spec-draft-type-v -ctvd --cache-type-v-draft", _DRAFT, takes_value=True),
    _note("--spec-draft-device -devd --device-draft", _DRAFT, takes_value=True),
    _note(
        "--spec-draft-ngl -ngld --gpu-layers-draft --n-gpu-layers-draft", _DRAFT, takes_value=True
    ),
    _note("--spec-draft-backend-sampling --no-spec-draft-backend-sampling", _DRAFT),
    _note("--spec-draft-p-split --draft-p-split", "drafts are one branch here", takes_value=True),
    _note("--spec-synth-len", "for llama-server's own benchmarks; ignored", takes_value=True),
    _note("--spec-synth-rates", "for llama-server's own benchmarks; ignored", takes_value=True),
    *(
        _note(f"--spec-ngram-{kind}-{what}", "llamactl's n-gram sizes are fixed", takes_value=True)
        for kind in ("simple", "map-k", "map-k4v")
        for what in ("size-n", "size-m", "min-hits")
    ),
    _note("--spec-default", "use --spec-type ngram-mod; ignored"),
    # --- refused: they would change the answers, or fetch a model
    _refuse("--version", "use `llamactl --version`"),
    _refuse("-cl --cache-list", "use `llamactl models` to list the models"),
    _refuse("--completion-bash", "llamactl's completions are in completions/ (docs/cli.md)"),
    _refuse("--list-devices", "use `llamactl ps` or `llamactl serve --help` (GPU offload)"),
    *(
        _refuse(f"--{name}", "the model's own RoPE settings are used; this would change them", True)
        for name in (
            "rope-scaling",
            "rope-scale",
            "rope-freq-base",
            "rope-freq-scale",
            "yarn-orig-ctx",
            "yarn-ext-factor",
            "yarn-attn-factor",
            "yarn-beta-slow",
            "yarn-beta-fast",
        )
    ),
    _refuse("--override-kv", "llamactl reads a model's metadata as written", takes_value=True),
    _refuse("--control-vector", "control vectors are not supported", takes_value=True),
    _refuse("--control-vector-scaled", "control vectors are not supported", takes_value=True),
    _refuse("--control-vector-layer-range", "control vectors are not supported", takes_value=True),
    _refuse("-mmu --mmproj-url", _DOWNLOAD, takes_value=True),
    _refuse("-dr --docker-repo", _DOWNLOAD, takes_value=True),
    _refuse("--samplers", _SAMPLER, takes_value=True),
    _refuse("--sampler-seq --sampling-seq", _SAMPLER, takes_value=True),
    _refuse("--top-nsigma --top-n-sigma", _SAMPLER, takes_value=True),
    _refuse("--xtc-probability", _SAMPLER, takes_value=True),
    _refuse("--xtc-threshold", _SAMPLER, takes_value=True),
    _refuse("--typical --typical-p", _SAMPLER, takes_value=True),
    _refuse("--adaptive-target", _SAMPLER, takes_value=True),
    _refuse("--adaptive-decay", _SAMPLER, takes_value=True),
    _refuse("--dynatemp-range", _SAMPLER, takes_value=True),
    _refuse("--dynatemp-exp", _SAMPLER, takes_value=True),
    _refuse("--mirostat", _SAMPLER, takes_value=True),
    _refuse("--mirostat-lr", _SAMPLER, takes_value=True),
    _refuse("--mirostat-ent", _SAMPLER, takes_value=True),
    _refuse(
        "--dry-sequence-breaker",
        "llamactl's DRY breakers are llama.cpp's defaults; set them per request",
        takes_value=True,
    ),
    _refuse("-l --logit-bias", "set logit_bias per request", takes_value=True),
    _refuse("--ignore-eos", "set ignore_eos per request (the native /completion)"),
    _refuse("-r --reverse-prompt", "set stop strings per request (stop)", takes_value=True),
    _refuse("-sp --special", "set it per request where the API has it"),
    _refuse("--spm-infill", "llamactl's infill uses the model's FIM order"),
    _refuse("-lcs --lookup-cache-static", "use --spec-type ngram-cache", takes_value=True),
    _refuse("-lcd --lookup-cache-dynamic", "use --spec-type ngram-cache", takes_value=True),
    _refuse("--ssl-key-file", "put a TLS proxy in front of llamactl", takes_value=True),
    _refuse("--ssl-cert-file", "put a TLS proxy in front of llamactl", takes_value=True),
    _refuse("--draft --draft-n --draft-max", f"{_REMOVED}: use --spec-draft-n-max", True),
    _refuse("--draft-min --draft-n-min", f"{_REMOVED}: use --spec-draft-n-min", True),
    _refuse("--spec-ngram-size-n", _REMOVED, takes_value=True),
    _refuse("--spec-ngram-size-m", _REMOVED, takes_value=True),
    _refuse("--spec-ngram-min-hits", _REMOVED, takes_value=True),
    *(
        _refuse(f"--{preset}", _DOWNLOAD)
        for preset in (
            "embd-gemma-default",
            "fim-qwen-1.5b-default",
            "fim-qwen-3b-default",
            "fim-qwen-7b-default",
            "fim-qwen-7b-spec",
            "fim-qwen-14b-spec",
            "fim-qwen-30b-default",
            "gpt-oss-20b-default",
            "gpt-oss-120b-default",
            "vision-gemma-4b-default",
            "vision-gemma-12b-default",
        )
    ),
)
