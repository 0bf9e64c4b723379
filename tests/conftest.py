"""Shared fixtures, and the `slow` marker's rule.

Every test runs with the user's own directories and LLAMACTL_* settings hidden (see
`isolated_dirs`), so a developer's ~/.config/llamactl/config.toml or exported LLAMACTL_PORT can
never change a test's outcome, and no test can write into their home directory.

Every test that loads a model is marked `slow`, so `pytest -m "not slow"` is a fast unit run.
Tests using a fixture named in `MODEL_FIXTURES` (here, or the same constant in their own
module for the module's fixtures) get the marker here; others carry it themselves. A test
without it that loads a model in this process (llama.cpp or Whisper, in the test or in a
fixture it sets up) fails and says where.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import wraps
from pathlib import Path
from typing import Any

import pytest

# Fixtures of this file that load a model: their users are `slow`.
MODEL_FIXTURES = frozenset({"server", "thinking_server"})
# environment variables that set settings: llamactl's and llama-server's
SETTINGS_ENV_PREFIXES = ("LLAMACTL_", "LLAMA_ARG_", "LLAMA_API_KEY")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        module = getattr(item, "module", None)
        loading = MODEL_FIXTURES | set(getattr(module, "MODEL_FIXTURES", ()))
        if loading & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


# ------------------------------------------------------------------- the `slow` guard
_loads: list[str] | None = None  # models loaded by the running non-slow test
_fixtures: list[str] = []  # the fixtures being set up, innermost last


def _recording(what: str, load: Callable[..., Any]) -> Callable[..., Any]:
    @wraps(load)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if _loads is not None:
            _loads.append(f"{what} (in fixture {_fixtures[-1]!r})" if _fixtures else what)
        return load(*args, **kwargs)

    return wrapper


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef[Any]) -> Iterator[Any]:
    _fixtures.append(fixturedef.argname)
    try:
        return (yield)
    finally:
        _fixtures.pop()


def pytest_configure(config: pytest.Config) -> None:
    import faster_whisper
    import llama_cpp

    llama_cpp.llama_model_load_from_file = _recording(
        "a llama.cpp model", llama_cpp.llama_model_load_from_file
    )
    faster_whisper.WhisperModel = _recording("a Whisper model", faster_whisper.WhisperModel)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    global _loads
    _loads = None if item.get_closest_marker("slow") else []  # fixtures' loads count too
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    global _loads
    try:
        result = yield
    finally:
        loads, _loads = _loads, None
    if loads:
        pytest.fail(f"this test loads {loads[0]}: mark it `slow` (see tests/conftest.py)")
    return result


@dataclass(frozen=True)
class IsolatedDirs:
    """The temporary XDG homes a test runs with; `config_file` does not exist until written."""

    config_home: Path
    data_home: Path
    cache_home: Path
    state_home: Path

    @property
    def config_file(self) -> Path:
        """Where llamactl looks for its config by default (XDG_CONFIG_HOME/llamactl)."""
        return self.config_home / "llamactl" / "config.toml"

    @property
    def models_dir(self) -> Path:
        """The default models directory (XDG_DATA_HOME/llamactl/models)."""
        return self.data_home / "llamactl" / "models"


@pytest.fixture(autouse=True)
def isolated_dirs(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> IsolatedDirs:
    """Point the XDG homes at fresh temp dirs and clear every variable that sets a setting
    (LLAMACTL_*, and llama-server's LLAMA_ARG_*).

    Clearing (rather than pointing LLAMACTL_CONFIG / LLAMACTL_MODELS_DIR somewhere) means the
    defaults under the temp XDG homes are what tests see; a test that needs a variable sets
    it with monkeypatch. The dirs live outside `tmp_path` so tests that inspect their own
    tmp_path don't find them there. Request this fixture by name to get the paths.
    """
    root = tmp_path_factory.mktemp("xdg")
    dirs = IsolatedDirs(
        config_home=root / "config",
        data_home=root / "data",
        cache_home=root / "cache",
        state_home=root / "state",
    )
    monkeypatch.setenv("XDG_CONFIG_HOME", str(dirs.config_home))
    monkeypatch.setenv("XDG_DATA_HOME", str(dirs.data_home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(dirs.cache_home))
    monkeypatch.setenv("XDG_STATE_HOME", str(dirs.state_home))
    for name in list(os.environ):
        if name.startswith(SETTINGS_ENV_PREFIXES):
            monkeypatch.delenv(name)
    return dirs


@pytest.fixture
def sigint_raises():
    """SIGINT raises KeyboardInterrupt in this process during the test, as at a desk.

    A runner started with SIGINT ignored (`trap '' INT`, some CI agents) passes that on, and
    Python then leaves it ignored: `_thread.interrupt_main()` does nothing and a Ctrl-C test
    waits for its timeout. Child processes restore it themselves (see test_cli_repl.py)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


# --------------------------------------------------------------------------- live servers
# The real server on 127.0.0.1 with the embedded model, shared by the server tests.
# Tests that need other settings (API keys, a small queue) start their own with
# `serverkit.run_server(...)`.


@pytest.fixture(scope="session")
def server():
    """`llamactl serve` defaults: 4 slots, the model's own (ChatML) template."""
    from serverkit import run_server

    with run_server(parallel=4) as live:
        yield live


@pytest.fixture(scope="session")
def thinking_server():
    """A server whose template opens a <think> block in the generation prompt, so SmolLM2's
    output starts as reasoning: exercises reasoning deltas, budgets and the control endpoint."""
    from serverkit import THINK_TEMPLATE, run_server

    with run_server(parallel=4, chat_template_file=str(THINK_TEMPLATE)) as live:
        yield live


# ------------------------------------------------------------------- tiny GGUFs (built once)
@pytest.fixture(scope="session")
def rank_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny BERT reranker (pooling rank, `cls` + `cls.output` head); see fixture_ggufs."""
    from fixture_ggufs import build_rank_bert

    return build_rank_bert(tmp_path_factory.mktemp("rank") / "tiny-rank-bert.gguf")


@pytest.fixture(scope="session")
def fim_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedded SmolLM2 with FIM token ids in its metadata; see fixture_ggufs."""
    from fixture_ggufs import build_fim_copy

    from llamactl.models import embedded_model_path

    return build_fim_copy(
        embedded_model_path(), tmp_path_factory.mktemp("fim") / "smollm2-fim.gguf"
    )


@pytest.fixture(scope="session")
def fim_basic_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """As `fim_gguf` with FIM_PRE, FIM_SUF and FIM_MID only (no repo / file separators)."""
    from fixture_ggufs import build_fim_copy

    from llamactl.models import embedded_model_path

    path = tmp_path_factory.mktemp("fim_basic") / "smollm2-fim-basic.gguf"
    return build_fim_copy(embedded_model_path(), path, kinds=("pre", "suf", "mid"))


@pytest.fixture(scope="session")
def smart_turn_model() -> Path:
    """Smart Turn v3.2: the copy llamactl's install put in the package (else taken out of the
    pipecat-ai wheel from PyPI into the user's cache; session scope runs before
    `isolated_dirs`); skipped with the reason offline."""
    from llamactl.engine.audio.turn import fetch_model

    try:
        return fetch_model()
    except (OSError, ValueError) as exc:  # no route to PyPI
        pytest.skip(f"the pipecat-ai wheel (Smart Turn) could not be fetched: {exc}")


@pytest.fixture
def smart_turn(smart_turn_model: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Semantic turn detection finds Smart Turn (LLAMACTL_SMART_TURN_MODEL) in this test."""
    monkeypatch.setenv("LLAMACTL_SMART_TURN_MODEL", str(smart_turn_model))
    return smart_turn_model


@pytest.fixture(scope="module")
def vocab_model():
    """The embedded model's vocabulary alone (grammars and tokenising, no weights)."""
    from llamactl.engine.model import Model
    from llamactl.models import embedded_model_path

    path = embedded_model_path()
    if path is None:
        pytest.skip("the embedded model is not installed")
    return Model(path, vocab_only=True)
