"""`llamactl convert` on plain chat checkpoints (Llama, Qwen2, Qwen3, Qwen3.5, LFM2, Gemma 3):
each converts in llama.cpp's layout, loads in the real engine and generates greedily (tokens
come out, the same twice); every quantization type loads; bad input is one clear error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from llamactl.converters import CheckpointError, ConvertError, convert
from llamactl.converters.examples import (
    CHAT_EXAMPLES,
    DECISION_EXAMPLES,
    SPEECH_EXAMPLES,
    write_examples,
)
from synthetic_checkpoints import cached, read_gguf, read_tensor
from typer.testing import CliRunner

from llamactl.cli.main import app
from llamactl.engine.engine import Engine, EngineConfig, GenerationRequest
from llamactl.engine.model import Model
from llamactl.engine.types import SamplingParams

ARCH = {
    "llama": "llama",
    "qwen2": "qwen2",
    "qwen3": "qwen3",
    "qwen35": "qwen35",
    "lfm2": "lfm2",
    "gemma3": "gemma3",
}
PROMPT = "Is A or B right? yes No 42"


def run(*args: Any) -> Any:
    return CliRunner().invoke(app, [*map(str, args)])


def greedy(path: Path, n: int = 8) -> list[int]:
    """Greedy tokens of the converted file through the real engine."""
    model = Model(path)
    try:
        with Engine(model, EngineConfig(n_parallel=1, n_ctx=256)) as eng:
            prompt = model.tokenize(PROMPT, add_special=True)
            _, dones = eng.submit(
                GenerationRequest(prompt, SamplingParams(temperature=0.0), max_tokens=n)
            ).collect()
    finally:
        model.close()
    return list(dones[0].token_ids)


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("chat_f16")
    return {
        name: convert(cached(tmp_path_factory, name), out / f"{name}.gguf").outfile
        for name in CHAT_EXAMPLES
    }


@pytest.mark.parametrize("family", CHAT_EXAMPLES)
def test_each_chat_family_converts_in_its_layout(converted, family):
    meta, tensors = read_gguf(converted[family])
    assert meta["general.architecture"] == ARCH[family]
    assert not any(k.endswith(".decision.type") for k in meta)
    assert "tokenizer.chat_template" in meta and meta["tokenizer.ggml.model"] == "gpt2"
    assert "tokenizer.chat_template.systemone" not in meta
    assert tensors["token_embd.weight"][1] == "F16"
    assert any(n.endswith("attn_norm.weight") and t[1] == "F32" for n, t in tensors.items())


@pytest.mark.slow
@pytest.mark.parametrize("family", CHAT_EXAMPLES)
def test_each_chat_family_loads_and_generates_greedily(converted, family):
    first = greedy(converted[family])
    assert len(first) == 8
    assert greedy(converted[family]) == first


def test_llama_q_and_k_rows_are_permuted_back(tmp_path_factory, converted):
    from llamactl.converters.checkpoint import Checkpoint

    ckpt = Checkpoint(cached(tmp_path_factory, "llama"))
    q = ckpt.lazy("model.layers.0.self_attn.q_proj.weight")()
    ours = read_tensor(converted["llama"], "blk.0.attn_q.weight")
    n_head = 4
    expect = q.reshape(n_head, 2, q.shape[0] // n_head // 2, -1).swapaxes(1, 2).reshape(q.shape)
    assert np.allclose(ours, expect, atol=1e-3)
    meta, _ = read_gguf(converted["llama"])
    assert meta["llama.rope.dimension_count"] == 16 and meta["llama.vocab_size"] > 0


def test_gemma3_norms_sliding_window_and_local_rope(tmp_path_factory, converted):
    from llamactl.converters.checkpoint import Checkpoint

    ckpt = Checkpoint(cached(tmp_path_factory, "gemma3"))
    meta, tensors = read_gguf(converted["gemma3"])
    assert meta["gemma3.attention.sliding_window"] == 32
    assert meta["gemma3.rope.freq_base_swa"] == 10000.0
    norm = ckpt.lazy("model.layers.0.pre_feedforward_layernorm.weight")()
    assert np.allclose(read_tensor(converted["gemma3"], "blk.0.ffn_norm.weight"), norm + 1.0)
    assert "output.weight" not in tensors  # tied to the embedding


def test_qwen2_keeps_its_qkv_biases(converted):
    _, tensors = read_gguf(converted["qwen2"])
    assert tensors["blk.0.attn_q.bias"][1] == "F32" and "output.weight" not in tensors


@pytest.mark.slow
@pytest.mark.parametrize("outtype", ["q4_0", "q4_k_m", "q5_k_m", "q8_0"])
def test_each_quant_type_loads_and_generates(tmp_path_factory, tmp_path, outtype):
    src = cached(tmp_path_factory, "llama")
    out = tmp_path / f"llama-{outtype}.gguf"
    result = run("convert", src, "--outfile", out, "--outtype", outtype, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["outtype"] == outtype and data["family"] == "llama" and data["bytes"] > 0
    assert [p.name for p in tmp_path.iterdir()] == [out.name]  # no staged f16 left behind
    meta, tensors = read_gguf(out)
    assert tensors["blk.0.ffn_up.weight"][1] != "F16"
    assert len(greedy(out, 4)) == 4


@pytest.mark.slow
def test_quantize_command(converted, tmp_path):
    out = tmp_path / "q.gguf"
    result = run("quantize", converted["qwen3"], out, "Q4_0")
    assert result.exit_code == 0, result.output
    assert "Wrote" in result.stdout and "Q4_0" in result.stdout
    assert read_gguf(out)[1]["blk.0.ffn_up.weight"][1] == "Q4_0"


def test_quantize_command_refuses_an_unknown_type(converted, tmp_path):
    result = run("quantize", converted["qwen3"], tmp_path / "q.gguf", "q3_zz")
    assert result.exit_code == 1 and "unknown quantization type" in result.output
    assert list(tmp_path.iterdir()) == []


def test_bad_input_is_one_clear_error(tmp_path_factory, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    result = run("convert", empty, "-o", tmp_path / "x.gguf")
    assert result.exit_code == 1 and "config.json" in result.output
    assert "Traceback" not in result.output

    odd = tmp_path / "odd"
    odd.mkdir()
    (odd / "config.json").write_text(json.dumps({"architectures": ["MambaForCausalLM"]}))
    result = run("convert", odd, "-o", tmp_path / "x.gguf")
    assert result.exit_code == 1
    assert "MambaForCausalLM" in result.output and "LlamaForCausalLM" in result.output
    assert "Gemma3ForCausalLM" in result.output

    src = cached(tmp_path_factory, "llama")
    result = run("convert", src, "-o", tmp_path / "x.gguf", "--outtype", "q3_zz")
    assert result.exit_code == 1 and "unknown --outtype" in result.output
    assert "q4_k_m" in result.output
    result = run("convert", src)
    assert result.exit_code == 1 and "--outfile" in result.output
    assert not (tmp_path / "x.gguf").exists()


def test_detection_errors_in_the_api(tmp_path):
    with pytest.raises(CheckpointError, match="config.json"):
        convert(tmp_path, tmp_path / "x.gguf")
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["Nope"]}))
    with pytest.raises(ConvertError, match="supported chat architectures: LlamaForCausalLM"):
        convert(tmp_path, tmp_path / "x.gguf")


def test_mmproj_of_a_chat_model_is_refused(tmp_path_factory, tmp_path):
    with pytest.raises(ConvertError, match="chat checkpoint"):
        convert(cached(tmp_path_factory, "qwen3"), tmp_path / "x.gguf", mmproj=True)


def test_example_writes_every_family_and_each_converts(tmp_path):
    result = run("convert", "--example", tmp_path / "ex", "--json")
    assert result.exit_code == 0, result.output
    made = json.loads(result.stdout)
    assert set(made) == set(CHAT_EXAMPLES) | set(DECISION_EXAMPLES) | set(SPEECH_EXAMPLES)
    out = tmp_path / "out"
    out.mkdir()
    for name, path in made.items():
        base = ["--base", made["qwen35"]] if name in ("lev", "kev") else []
        done = run("convert", path, "-o", out / f"{name}.gguf", "--quiet", *base)
        assert done.exit_code == 0, (name, done.output)
    assert len(list(out.iterdir())) == len(made)


def test_example_prints_the_next_steps(tmp_path):
    result = run("convert", "--example", tmp_path / "ex")
    assert result.exit_code == 0, result.output
    assert "llamactl convert" in result.stdout and str(tmp_path / "ex" / "llama") in result.stdout


def test_examples_are_importable_without_pytest(tmp_path):
    import subprocess
    import sys

    code = (
        "import sys; from llamactl.converters.examples import write_examples\n"
        f"write_examples({str(tmp_path / 'ex')!r})\n"
        "assert 'pytest' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    assert (tmp_path / "ex" / "gemma3" / "config.json").is_file()


def test_write_examples_returns_each_path(tmp_path):
    made = write_examples(tmp_path)
    assert made["lev"].parent == tmp_path and (made["llama"] / "model.safetensors").is_file()


def test_the_engine_quantizer_reports_the_bytes_written(converted, tmp_path):
    import llamactl.engine.quantize  # noqa: F401  (the module must not hide the face's name)
    from llamactl.engine import quantize_gguf

    seen: list[int] = []
    out = quantize_gguf(converted["llama"], tmp_path / "q.gguf", "Q8_0", progress=seen.append)
    assert seen and seen[-1] == out.stat().st_size
    assert seen == sorted(seen) and [p.name for p in tmp_path.iterdir()] == ["q.gguf"]
