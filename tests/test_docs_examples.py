"""The documents' examples, run for real: every fenced `bash`, `sh`, `console` and `python`
block of README.md and docs/*.md, against one `llamactl serve` on the embedded model.

The documents' convention: examples talk to a server at `http://127.0.0.1:8080` (the
`serve` default); this test starts one on a free port and rewrites that address. A block that
cannot run here (an install, a GPU build, the hub, a microphone, a terminal) carries
`<!-- not-run: why -->` on the line right before its fence, and must say why. Blocks run in
a scratch directory that holds the audio files the examples read (`talk.wav`,
`meeting.wav`, `speech-24khz.wav`); `$ ` prompts of `console` blocks are commands, the other
lines their output. Untagged fences (plain ```) are transcripts and layouts: not run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from serverkit import free_port

pytestmark = pytest.mark.slow  # ~20 examples, each a process of its own

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUN_LANGS = {"bash", "sh", "console", "python"}
DOC_URL = "127.0.0.1:8080"  # the address every example uses
FENCE = re.compile(r"^(\s*)(`{3,})([\w+-]*)\s*$")
NOT_RUN = re.compile(r"^\s*<!--\s*not-run:(.*?)-->\s*$")
COMMENT = re.compile(r"^\s*<!--.*-->\s*$")
TIMEOUT = 600  # seconds per block: generous, for a loaded 2-core machine (most take seconds)


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    not_run: str | None  # the marker's reason, "" for a marker without one

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks_of(path: Path) -> Iterator[Block]:
    """The fenced blocks of a Markdown file in the languages that run, with their marker."""
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        indent, ticks, lang = m.groups()
        end = i + 1
        while end < len(lines) and not lines[end].strip().startswith(ticks):
            end += 1
        if lang in RUN_LANGS:
            body = [line[len(indent) :] for line in lines[i + 1 : end]]
            yield Block(path, i + 1, lang, "\n".join(body) + "\n", _marker(lines, i))
        i = end + 1


def _marker(lines: list[str], fence: int) -> str | None:
    """The not-run reason among the comment lines right above the fence (None: runs)."""
    j = fence - 1
    while j >= 0 and COMMENT.match(lines[j]):
        m = NOT_RUN.match(lines[j])
        if m:
            return m.group(1).strip()
        j -= 1
    return None


BLOCKS = [block for path in DOCS for block in blocks_of(path)]


def test_the_documents_have_examples() -> None:
    assert len(BLOCKS) >= 15
    assert len([b for b in BLOCKS if b.not_run is None]) >= 10


def test_every_skipped_block_says_why() -> None:
    unexplained = [b.id for b in BLOCKS if b.not_run is not None and len(b.not_run) < 8]
    assert not unexplained, f"<!-- not-run: ... --> without a reason: {unexplained}"


def test_every_not_run_marker_is_on_a_block() -> None:
    """A marker not right above a runnable fence is a mistake (it skips nothing)."""
    stray = []
    for path in DOCS:
        lines = path.read_text(encoding="utf-8").splitlines()
        for n, line in enumerate(lines):
            if not NOT_RUN.match(line):
                continue
            j = n + 1
            while j < len(lines) and COMMENT.match(lines[j]):
                j += 1
            fence = FENCE.match(lines[j]) if j < len(lines) else None
            if fence is None or fence.group(3) not in RUN_LANGS:
                stray.append(f"{path.relative_to(ROOT)}:{n + 1}")
    assert not stray, f"not-run markers above no runnable block: {stray}"


# ------------------------------------------------------------------ the server and files
@pytest.fixture(scope="module")
def doc_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`llamactl serve` as a user starts it (the embedded model, its defaults), on a free
    port; yields its host:port."""
    port = free_port()
    log = tmp_path_factory.mktemp("doc-server") / "serve.log"
    env = _hermetic_env(tmp_path_factory.mktemp("doc-home"))
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "llamactl", "serve", "--port", str(port), "--parallel", "2"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=ROOT,
        )
        try:
            _wait_healthy(f"http://127.0.0.1:{port}", proc, log)
            yield f"127.0.0.1:{port}"
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"llamactl serve exited: {log.read_text(errors='replace')}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"llamactl serve did not become healthy: {log.read_text()}")


def _hermetic_env(home: Path) -> dict[str, str]:
    """The user's environment without llamactl's settings, with the venv's scripts first."""
    prefixes = ("LLAMACTL_", "LLAMA_ARG_", "LLAMA_API_KEY")
    env = {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["XDG_CONFIG_HOME"] = str(home / "config")
    env["XDG_CACHE_HOME"] = str(home / "cache")
    env["XDG_DATA_HOME"] = str(home / "data")
    env["NO_COLOR"] = "1"
    return env


@pytest.fixture(scope="module")
def audio_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """The recordings the examples name, spoken by eSpeak NG."""
    from audiokit import speech, to_rate, wav_bytes

    samples, rate = speech("The weather in Paris is sunny today.")
    return {
        "talk.wav": wav_bytes(samples, rate),
        "meeting.wav": wav_bytes(samples, rate),
        "speech-24khz.wav": wav_bytes(to_rate(samples, rate, 24000), 24000),
    }


def _script(block: Block, address: str) -> str:
    code = block.code.replace(DOC_URL, address).replace("localhost:8080", address)
    if block.lang == "python":
        return code
    lines = code.splitlines()
    if block.lang == "console":  # commands after `$ `; the rest is their output
        lines = [line[2:] for line in lines if line.startswith("$ ")]
    else:
        lines = [line[2:] if line.startswith("$ ") else line for line in lines]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_example_runs(block: Block, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    if block.not_run is not None:
        assert block.not_run, f"{block.id}: a not-run marker must say why"
        pytest.skip(f"not-run: {block.not_run}")
    address: str = request.getfixturevalue("doc_server")
    files: dict[str, bytes] = request.getfixturevalue("audio_files")
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    script = _script(block, address)
    if block.lang == "python":
        (tmp_path / "example.py").write_text(script, encoding="utf-8")
        argv = [sys.executable, "example.py"]
    else:
        argv = ["bash", "-e", "-o", "pipefail", "-c", script]
    env = _hermetic_env(tmp_path / "home")
    done = subprocess.run(
        argv,
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, (
        f"{block.id} failed (exit {done.returncode})\n--- script\n{script}"
        f"--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
    )
