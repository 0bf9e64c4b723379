"""`llamactl convert` through Typer's CliRunner: output, --dry-run, --json, errors, exit codes."""

from __future__ import annotations

import json
from typing import Any

from synthetic_checkpoints import cached, read_gguf
from typer.testing import CliRunner

from llamactl.cli.main import app


def run(*args: Any) -> Any:
    return CliRunner().invoke(app, ["convert", *map(str, args)])


def test_convert_writes_and_summarises(tmp_path_factory, tmp_path):
    src = cached(tmp_path_factory, "lfm2-d1")
    out = tmp_path / "d1.gguf"
    result = run(src, "--outfile", out, "--outtype", "bf16")
    assert result.exit_code == 0, result.output
    assert f"Wrote {out}" in result.stdout and "lfm2-d1 (lfm2, model)" in result.stdout
    meta, tensors = read_gguf(out)
    assert meta["general.file_type"] == 32 and tensors["blk.0.ffn_up.weight"][1] == "BF16"
    assert list(tmp_path.iterdir()) == [out]


def test_quiet_prints_nothing(tmp_path_factory, tmp_path):
    result = run(cached(tmp_path_factory, "lfm2-d1"), "-o", tmp_path / "d1.gguf", "--quiet")
    assert result.exit_code == 0 and result.stdout == "" and (tmp_path / "d1.gguf").is_file()


def test_dry_run_lists_the_tensor_map(tmp_path_factory, tmp_path):
    src = cached(tmp_path_factory, "kev")
    base = cached(tmp_path_factory, "qwen35-base")
    result = run(src, "-o", tmp_path / "kev.gguf", "--base", base, "--dry-run")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["GGUF", "tensor", "shape", "type", "size", "from"]
    row = next(line for line in lines if line.startswith("blk.0.ffn_up.weight"))
    assert "64×128" in row and "F16" in row and "mlp.up_proj.weight (F32) + LoRA" in row
    assert any(line.startswith("cls.output.weight") and "head.pt" in line for line in lines)
    assert "30 tensors" in result.stdout and "nothing written" in result.stdout
    assert "trunk-only copy" in result.stdout
    assert list(tmp_path.iterdir()) == []


def test_dry_run_json(tmp_path_factory, tmp_path):
    src = cached(tmp_path_factory, "openbmb-minicpm-ocr-jev")
    result = run(src, "-o", tmp_path / "m.gguf", "--dry-run", "--json", "--outtype", "q8_0")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["dry_run"] and data["decision_type"] == "openbmb-minicpm-ocr-jev"
    assert data["architecture"] == "qwen35" and not data["loads_natively"]
    assert data["head_tensors"] == ["cls.output.weight"]
    names = {t["name"]: t for t in data["tensors"]}
    assert names["cls.output.weight"]["shape"] == [64, 2]
    assert names["blk.1.attn_q.weight"]["type"] == "Q8_0"
    assert "bytes" not in data and list(tmp_path.iterdir()) == []


def test_json_after_writing_an_mmproj(tmp_path_factory, tmp_path):
    src = cached(tmp_path_factory, "lfm2-d1")
    result = run(src, "-o", tmp_path / "d1.gguf", "--mmproj", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["outfile"] == str(tmp_path / "mmproj-d1.gguf") and data["kind"] == "mmproj"
    assert data["architecture"] == "clip" and data["bytes"] > 0 and data["tensor_count"] == 27
    assert (tmp_path / "mmproj-d1.gguf").is_file()


def test_errors_are_one_line_with_exit_code_1(tmp_path_factory, tmp_path):
    result = run(tmp_path / "nope", "-o", tmp_path / "x.gguf")
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: ") and "not a directory" in result.stderr
    assert "Traceback" not in result.output
    lev = run(cached(tmp_path_factory, "lev"), "-o", tmp_path / "x.gguf")
    assert lev.exit_code == 1 and "--base PATH" in lev.stderr
    missing_dir = run(cached(tmp_path_factory, "lfm2-d1"), "-o", tmp_path / "no" / "x.gguf")
    assert missing_dir.exit_code == 1 and "does not exist" in missing_dir.stderr


def test_bad_options_exit_1_and_usage_errors_2(tmp_path_factory, tmp_path):
    src = cached(tmp_path_factory, "lfm2-d1")
    assert run(src, "-o", tmp_path / "x.gguf", "--no-such-flag").exit_code == 2
    bad = run(src, "-o", tmp_path / "x.gguf", "--outtype", "q3_zz")
    assert bad.exit_code == 1, bad.output  # a clear error naming the types, not a usage error
    assert "unknown --outtype 'q3_zz'" in bad.stderr and "q4_k_m" in bad.stderr
    assert run(src).exit_code == 1  # --outfile is required (or --example DIR)
