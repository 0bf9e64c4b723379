"""The one Settings -> engine mapping: `chat` and `serve` build the same engine from the same
settings, every engine setting reaches the engine, and flags and help come from the fields."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import pytest
from llamactl.server import loader as server_loader
from llamactl.server import state as server_state
from typer.testing import CliRunner

from llamactl.cli import _engine
from llamactl.cli._settings_options import default_text, setting_help
from llamactl.cli.main import app
from llamactl.config import Engine, Flag, Settings, load_settings
from llamactl.engine.decision import DecisionConfig
from llamactl.engine.engine import EngineConfig
from llamactl.engine_settings import decision_config, engine_config, sampling_defaults


class FakeModel:
    def __init__(self, path, **load) -> None:
        self.path = Path(path)
        self.info = SimpleNamespace(n_ctx_train=131072, capabilities=())

    def close(self) -> None:
        pass


class FakeEngine:
    built: list[EngineConfig] = []

    n_ctx_slot = 4096  # what the server logs at start

    def __init__(self, model, config: EngineConfig) -> None:
        self.model, self.config = model, config
        FakeEngine.built.append(config)

    def close(self) -> None:
        pass


class FakeChat:
    templates: list[str | None] = []

    def __init__(self, engine, template: str | None = None) -> None:
        FakeChat.templates.append(template)


@pytest.fixture
def fakes(monkeypatch):
    """The real paths of `chat` and `serve`, with llama.cpp replaced by recorders."""
    FakeEngine.built, FakeChat.templates = [], []
    monkeypatch.setattr("llamactl.engine.engine.Engine", FakeEngine)
    monkeypatch.setattr("llamactl.engine.model.Model", FakeModel)
    monkeypatch.setattr("llamactl.engine.chat.model.ChatModel", FakeChat)
    monkeypatch.setattr(server_loader, "ChatModel", FakeChat)
    monkeypatch.setattr("llamactl.ChatModel", FakeChat)  # the public face the CLI imports
    monkeypatch.setattr(server_state, "is_decision_model", lambda path: False)


def build_both(settings: Settings, model: Path) -> tuple[EngineConfig, EngineConfig]:
    """(chat's config, serve's config) for the same settings."""
    _engine.load_chat(dataclasses.replace(settings, model=str(model))).close()
    state = server_state.ServerState(settings, model)
    state._load()
    assert state.load_error is None
    chat, serve = FakeEngine.built
    assert FakeChat.templates[0] == FakeChat.templates[1]
    return chat, serve


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    path = tmp_path / "m.gguf"
    path.write_bytes(b"GGUF" + bytes(60))
    return path


def test_chat_and_serve_build_identical_engine_configs(fakes, model_file, tmp_path) -> None:
    template = tmp_path / "t.jinja"
    template.write_text("{{ messages }}")
    settings = load_settings(
        {
            "parallel": 1,
            "cache_ram": 123,
            "spec_type": "ngram-simple,ngram-cache",
            "spec_draft_n_max": 7,
            "chat_template_file": template,
            "ubatch_size": 128,
            "threads_batch": 3,
            "cache_type": "q8_0",
        }
    )
    chat, serve = build_both(settings, model_file)
    assert chat == serve
    assert chat.n_ctx == 0  # the engine's own rule: min(train ctx, 4096) per slot
    assert (chat.cache_ram_mib, chat.spec_types, chat.spec_draft_n_max) == (
        123,
        ("ngram-simple", "ngram-cache"),
        7,
    )
    assert (chat.n_ubatch, chat.n_threads_batch, chat.kv_type) == (128, 3, "q8_0")
    assert FakeChat.templates == ["{{ messages }}"] * 2


def test_chat_takes_one_slot_and_nothing_else_differs(fakes, model_file) -> None:
    chat, serve = build_both(load_settings({}), model_file)
    assert serve.n_parallel == 4 and chat.n_parallel == 1
    assert dataclasses.replace(serve, n_parallel=1) == chat


def test_every_engine_marker_names_an_engine_config_field() -> None:
    engine_fields = {f.name for f in dataclasses.fields(EngineConfig)}
    for name, info in Settings.__pydantic_fields__.items():
        for marker in info.metadata:
            if isinstance(marker, Engine):
                assert marker.target in engine_fields, name


def test_decision_config_takes_the_settings_it_shares() -> None:
    s = load_settings({"parallel": 2, "n_ctx": 1024, "batch_size": 64, "threads": 1})
    assert decision_config(s) == DecisionConfig(
        n_parallel=2, n_ctx=1024, n_batch=64, n_threads=1, flash_attn=True, max_queue=64
    )


def test_ubatch_and_threads_batch_from_flags_env_and_file(monkeypatch, isolated_dirs) -> None:
    assert engine_config(load_settings({})).n_ubatch == 512
    assert engine_config(load_settings({})).n_threads_batch == 0  # 0: as threads
    monkeypatch.setenv("LLAMACTL_UBATCH_SIZE", "256")
    isolated_dirs.config_file.parent.mkdir(parents=True)
    isolated_dirs.config_file.write_text("threads_batch = 2\n")
    config = engine_config(load_settings({}))
    assert (config.n_ubatch, config.n_threads_batch) == (256, 2)
    assert engine_config(load_settings({"ubatch_size": 64})).n_ubatch == 64


def test_sampling_defaults_come_from_the_settings() -> None:
    s = load_settings({"temperature": 0.0, "top_k": 5, "seed": 9})
    sampling = sampling_defaults(s)
    assert (sampling.temperature, sampling.top_k, sampling.seed) == (0.0, 5, 9)


def test_help_defaults_come_from_the_fields() -> None:
    assert setting_help("port") == "Port [8080]."
    assert default_text("ubatch_size") == "512" and default_text("kv_unified") == "off"
    for command in ("serve", "chat"):
        result = CliRunner().invoke(app, [command, "--help-all"], env={"COLUMNS": "300"})
        assert result.exit_code == 0
        assert "--ubatch-size" in result.stdout and "-ub" in result.stdout
        assert "--threads-batch" in result.stdout and "-tb" in result.stdout


def test_every_flag_setting_is_an_option_of_its_commands() -> None:
    for command in ("serve", "chat"):
        result = CliRunner().invoke(app, [command, "--help-all"], env={"COLUMNS": "300"})
        for name, info in Settings.__pydantic_fields__.items():
            flag = next((m for m in info.metadata if isinstance(m, Flag)), None)
            if flag is not None and command in flag.commands:
                long = flag.long or "--" + name.replace("_", "-")
                assert long in result.stdout, (command, long)


def test_bounds_live_on_the_fields() -> None:
    with pytest.raises(Exception, match="spec_draft_n_max must be >= 1"):
        load_settings({"spec_draft_n_max": 0})
    # llama-server's lines ask for 64: capped at the 48 a draft may hold (exactness)
    assert load_settings({"spec_draft_n_max": 64}).spec_draft_n_max == 48
    with pytest.raises(Exception, match="temperature must be between 0.0 and 2.0"):
        load_settings({"temperature": 8})
    with pytest.raises(Exception, match="ubatch_size must be >= 1"):
        load_settings({"ubatch_size": 0})
