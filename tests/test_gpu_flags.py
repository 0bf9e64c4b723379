"""GPU offload and memory flags (docs/serve.md, GPUs): from the command line to llama.cpp's
model parameters, the one-line note of a CPU-only build, and real loads with --no-mmap and
--mlock."""

from __future__ import annotations

import ctypes

import llama_cpp
import pytest
from typer.testing import CliRunner

from llamactl.cli.main import app
from llamactl.config import load_settings
from llamactl.core.errors import ConfigError
from llamactl.engine.model import Model, ModelLoad, gpu_offload_supported, model_params
from llamactl.engine_settings import gpu_note, model_load
from llamactl.models import embedded_model_path

GPU_FLAGS = {"n_gpu_layers": 12, "split_mode": "row", "main_gpu": 1, "tensor_split": "3,1"}


def test_the_flags_become_the_model_load() -> None:
    assert model_load(load_settings({})) == ModelLoad()  # llama-server's: all layers, mmap
    load = model_load(load_settings({**GPU_FLAGS, "mlock": True, "mmap": False}))
    assert load == ModelLoad(12, "row", 1, (3.0, 1.0), use_mmap=False, use_mlock=True)


def test_every_weights_marker_names_a_model_load_field() -> None:
    import dataclasses

    from llamactl.config import setting_fields
    from llamactl.config.fields import Weights

    names = {f.name for f in dataclasses.fields(ModelLoad)}
    targets = {
        m.target
        for info in setting_fields().values()
        for m in info.metadata
        if isinstance(m, Weights)
    }
    assert targets == names


def test_the_model_load_becomes_llama_cpps_params() -> None:
    params, keep = model_params(ModelLoad(12, "row", 1, (3.0, 1.0), False, True))
    expected_layers = 12 if gpu_offload_supported() else 0
    assert params.n_gpu_layers == expected_layers
    assert params.split_mode == llama_cpp.LLAMA_SPLIT_MODE_ROW and params.main_gpu == 1
    assert params.load_mode == llama_cpp.LLAMA_LOAD_MODE_MLOCK  # no mmap, locked
    split = ctypes.cast(params.tensor_split, ctypes.POINTER(ctypes.c_float))
    assert [split[0], split[1], split[2]] == [3.0, 1.0, 0.0] and keep is not None
    mapped, _ = model_params(ModelLoad(use_mlock=True))
    assert mapped.load_mode == llama_cpp.LLAMA_LOAD_MODE_MMAP_MLOCK
    read, _ = model_params(ModelLoad(use_mmap=False))
    assert read.load_mode == llama_cpp.LLAMA_LOAD_MODE_NONE


def test_bad_values_are_refused() -> None:
    with pytest.raises(ConfigError, match="tensor_split"):
        model_load(load_settings({"tensor_split": "3,x"}))
    with pytest.raises(ConfigError):
        load_settings({"split_mode": "diagonal"})
    with pytest.raises(ConfigError):
        load_settings({"n_gpu_layers": -2})


@pytest.mark.skipif(gpu_offload_supported(), reason="a GPU build offloads instead")
def test_a_cpu_only_build_accepts_gpu_flags_with_a_note() -> None:
    assert gpu_note(load_settings({})) is None
    assert gpu_note(load_settings({"mlock": True})) is None  # works on the CPU
    note = gpu_note(load_settings({"n_gpu_layers": 99}))
    assert note is not None and "no GPU backend" in note and "\n" not in note


@pytest.mark.slow
@pytest.mark.skipif(gpu_offload_supported(), reason="a GPU build offloads instead")
def test_chat_with_gpu_flags_on_a_cpu_build_answers_and_notes() -> None:
    args = ["chat", "--temp", "0", "-n", "4", "-ngl", "99", "-sm", "none", "-mg", "0", "Hi"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip()
    assert result.stderr.count("no GPU backend") == 1


@pytest.mark.slow
@pytest.mark.parametrize(
    "load", [ModelLoad(use_mmap=False), ModelLoad(use_mlock=True), ModelLoad(False, use_mlock=True)]
)
def test_the_real_model_loads_without_mmap_and_locked(load: ModelLoad) -> None:
    path = embedded_model_path()
    assert path is not None
    reference = Model(path)
    model = Model(path, load=load)
    try:
        assert model.load == load
        assert model.n_vocab == reference.n_vocab
        assert model.tokenize("Bonjour la France") == reference.tokenize("Bonjour la France")
    finally:
        model.close()
        reference.close()


@pytest.mark.slow
def test_chat_answers_the_same_with_no_mmap_and_mlock() -> None:
    base = ["chat", "--temp", "0", "-n", "12", "--json", "Name a colour."]
    plain = CliRunner().invoke(app, base)
    loaded = CliRunner().invoke(app, [*base, "--no-mmap", "--mlock"])
    assert plain.exit_code == 0 and loaded.exit_code == 0, loaded.output
    assert plain.stdout.split('"usage"')[0] == loaded.stdout.split('"usage"')[0]


@pytest.mark.slow
def test_a_failed_load_is_one_error_line_with_llama_cpps_reason(tmp_path) -> None:
    """llama.cpp's own error lines are not printed before the `Error:` line: its reason is
    in it."""
    bad = tmp_path / "notes.gguf"
    bad.write_text("not a model")
    result = CliRunner().invoke(app, ["chat", "-m", str(bad), "hi"])
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert "invalid magic characters" in lines[0]
