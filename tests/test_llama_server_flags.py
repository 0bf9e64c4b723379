"""llama-server's command lines start `llamactl serve` unchanged (cli/llama_server_flags.py).

Every flag llama-server b11434 lists is an option of `serve`: its own, another spelling that
sets one, a flag accepted with a note, or a flag refused with its reason. Real command lines
from llama-server's README and docs run against the embedded model.
"""

from __future__ import annotations

import importlib.util
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer.main
from processkit import serve
from serverkit import free_port
from typer.testing import CliRunner

from llamactl.cli import serve as serve_module
from llamactl.cli.llama_server_flags import LLAMA_SERVER_FLAGS
from llamactl.cli.main import app
from llamactl.models import embedded_model_path

ROOT = Path(__file__).resolve().parent.parent
FLAG_LIST = ROOT / "tests" / "data" / "llama_server_b11434_flags.txt"


def llama_server_rows() -> list[list[str]]:
    lines = FLAG_LIST.read_text(encoding="utf-8").splitlines()
    return [line.split(", ") for line in lines if line and not line.startswith("#")]


def serve_spellings() -> tuple[set[str], set[str]]:
    """serve's own option strings, and the compatibility table's."""
    command = typer.main.get_command(app).commands["serve"]
    own: set[str] = {"-h", "--help", "--usage"}
    compat: set[str] = set()
    names = {f"llama_server_flag_{i}" for i in range(len(LLAMA_SERVER_FLAGS))}
    for p in command.params:
        opts = {*p.opts, *getattr(p, "secondary_opts", ())}
        (compat if p.name in names else own).update(opts)
    return own, compat


def test_every_llama_server_flag_is_a_serve_option() -> None:
    own, compat = serve_spellings()
    rows = llama_server_rows()
    assert len(rows) > 250  # the whole README, not a part of it
    missing = [s for row in rows for s in row if s not in own | compat]
    assert missing == []


def test_the_table_never_shadows_an_option_and_names_each_spelling_once() -> None:
    own, compat = serve_spellings()
    assert own & compat == set()
    spellings = [s for entry in LLAMA_SERVER_FLAGS for s in entry.spellings]
    assert len(spellings) == len(set(spellings))
    targets = {e.target for e in LLAMA_SERVER_FLAGS if e.action == "sets"}
    command = typer.main.get_command(app).commands["serve"]
    assert targets <= {p.name for p in command.params}


def test_docs_list_the_table_as_it_is() -> None:
    spec = importlib.util.spec_from_file_location(
        "gen_llama_server_flags", ROOT / "scripts" / "gen_llama_server_flags.py"
    )
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    doc = (ROOT / "docs" / "serve.md").read_text(encoding="utf-8")
    assert gen.rendered(doc) == doc, "run `python scripts/gen_llama_server_flags.py`"


# ------------------------------------------------------------ what a flag does, no model loaded
class Loaded(Exception):
    """Raised where serve has its settings: the test stops there."""


@pytest.fixture
def settings_of(monkeypatch: pytest.MonkeyPatch):
    """Run `llamactl serve ARGS` up to its settings (no model loads): (result, settings)."""
    seen: dict[str, Any] = {}
    real = serve_module.load_settings

    def capture(overrides: dict[str, Any]) -> Any:
        seen["settings"] = real(overrides)
        raise Loaded

    monkeypatch.setattr(serve_module, "load_settings", capture)

    def run(*args: str) -> tuple[Any, Any]:
        seen.clear()
        result = CliRunner().invoke(app, ["serve", *args], env={"COLUMNS": "400"})
        return result, seen.get("settings")

    return run


@pytest.mark.parametrize(
    ("args", "field", "value"),
    [
        (["-ctv", "q8_0"], "cache_type", "q8_0"),
        (["--cache-type-k", "bf16"], "cache_type", "bf16"),
        (["-nocb"], "cont_batching", False),
        (["-kvu"], "kv_unified", True),
        (["-no-kvu"], "kv_unified", False),
        (["-nr"], "repack", False),
        (["--swa-checkpoints", "3"], "ctx_checkpoints", 3),
        (["-hfr", "owner/repo:Q4_K_M"], "hf_repo", "owner/repo:Q4_K_M"),
        (["-hf", "owner/repo", "-hff", "model-Q8_0.gguf"], "hf_repo", "owner/repo:model-Q8_0.gguf"),
        (["--spec-draft-model", "draft.gguf"], "model_draft", "draft.gguf"),
        (["--draft-p-min", "0.5"], "spec_draft_p_min", 0.5),
        (["--presence-penalty", "0.5"], "presence_penalty", 0.5),
        (["--no-cache-prompt"], "cache_prompt", False),
        (["-fa"], "flash_attn", "on"),
        (["-fa", "off"], "flash_attn", "off"),
        (["--spec-draft-n-max", "64"], "spec_draft_n_max", 48),
        (["-t", "1"], "threads", 1),
        (["-mu", "https://example.com/m.gguf"], "model_url", "https://example.com/m.gguf"),
        (["--no-webui"], "webui", False),
        (["--no-ui"], "webui", False),
    ],
)
def test_llama_server_spellings_set_the_setting(settings_of, args, field, value) -> None:
    result, settings = settings_of(*args)
    assert settings is not None, result.output
    assert getattr(settings, field) == value


def test_flags_that_change_nothing_here_are_accepted_with_a_note(settings_of) -> None:
    args = [
        "--no-warmup",
        "--threads-http",
        "4",
        "--keep",
        "10",
        "--no-context-shift",
        "--swa-full",
        "--n-cpu-moe",
        "3",
        "-dev",
        "none",
        "-C",
        "0xff",
        "--numa",
        "distribute",
        "--log-colors",
        "off",
    ]
    result, settings = settings_of(*args)
    assert settings is not None, result.output
    for flag in ("--threads-http", "--keep", "--swa-full", "--n-cpu-moe", "-dev"):
        assert flag in result.stderr, flag
    assert settings.cache_type == "auto"  # nothing else changed


def test_a_second_spelling_never_overrides_the_flag_itself(settings_of) -> None:
    result, settings = settings_of("-ctk", "bf16", "-ctv", "q8_0")
    assert settings is not None and settings.cache_type == "bf16"
    assert "-ctv/--cache-type-v: ignored, cache_type is bf16" in result.stderr


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--mirostat", "2"], "sampler would change the answers"),
        (["--rope-freq-base", "10000"], "RoPE"),
        (["--mmproj-url", "https://example.com/p.gguf"], "llamactl pull"),
        (["--control-vector", "v.gguf"], "control vectors"),
        (["--draft-max", "16"], "removed"),
        (["--gpt-oss-20b-default"], "llamactl pull"),
        (["-hff", "model.gguf"], "needs the flag it completes"),
    ],
)
def test_flags_that_would_change_the_answers_are_refused(settings_of, args, said) -> None:
    result, settings = settings_of(*args)
    assert settings is None
    assert result.exit_code == 2
    assert said in result.output
    assert "Traceback" not in result.output


# ------------------------------------------------------------------ real command lines, run
# From llama-server b11434's README and docs (tools/server/README.md, docs/speculative.md,
# docs/function-calling.md), with the model file replaced by the embedded one; -hf lines
# would download.
MODEL = "{model}"
REAL_LINES = [
    "--model {model}",
    "-m {model} -c 2048",
    "-m {model} -c 8192 -n 1024 -np 2",
    "--jinja -fa -m {model}",
    "-m {model} --spec-type ngram-simple",
    "-m {model} --spec-type ngram-simple --spec-draft-n-max 64",
    "-m {model} --spec-type ngram-mod --spec-ngram-mod-n-match 24 --spec-ngram-mod-n-min 48"
    " --spec-ngram-mod-n-max 64",
    "-m {model} --no-mmproj-offload",
    "-m {model} --mcp-servers-config mcp.json",
    "-m {model} --ui-config {ui}",
    "-m {model} -ngl 99 -fa on -c 4096 -ctk q8_0 -ctv q8_0 --no-webui",
    "-m {model} -t 2 -tb 2 -b 512 -ub 512 --cont-batching --metrics --slots --no-warmup"
    " --log-disable",
]


@pytest.mark.slow
@pytest.mark.parametrize("line", REAL_LINES)
def test_a_real_llama_server_command_line_serves(tmp_path: Path, line: str) -> None:
    port = free_port()
    words = [
        w.replace("{model}", str(embedded_model_path())).replace("{ui}", '{"a":1}')
        for w in line.split()
    ]
    with serve(tmp_path, *words, "--port", str(port), port=port) as live:
        live.wait_healthy()
        r = httpx.post(
            live.url + "/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2},
            timeout=60,
        )
        assert r.status_code == 200, r.text
        assert live.stop(signal.SIGINT) == 0
        assert "Traceback" not in live.stderr
