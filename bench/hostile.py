"""Issue 31's hostile cases against a real `llamactl serve`, with what each costs the others.

For each case a fresh server process is started (the embedded SmolLM2, `--parallel 1`, the
flags the case needs), the hostile requests are sent, and meanwhile `/health` is asked every
20 ms (5 s timeout) and the server's RSS sampled every 50 ms. Printed per case: what the
hostile client got, `/health` p50 / p99 / max and failures, and the server's peak RSS over its
idle RSS. `--checkout DIR` runs another checkout's code (e.g. a `git worktree` of the commit
before the fix), so before/after come from the same script:

    git worktree add /tmp/before ec6c650
    python bench/hostile.py --checkout /tmp/before   # before
    python bench/hostile.py                           # after

Run it alone: two cores are shared by everything. Cases that hang the old server are cut
after `--case-timeout` seconds and reported as such.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from robustness import ROOT, Server

sys.path.insert(0, str(ROOT / "tests"))
from audiokit import flac_silence  # noqa: E402

HI = [{"role": "user", "content": "Hi"}]


# ----------------------------------------------------------------------------- measuring


@dataclass
class Watch:
    """/health latencies and the server's RSS while a case runs."""

    server: Server
    latencies: list[float] = field(default_factory=list)
    failures: int = 0
    rss_peak: float = 0.0
    stop: threading.Event = field(default_factory=threading.Event)

    def _health(self) -> None:
        with httpx.Client(timeout=5) as client:
            while not self.stop.is_set():
                t0 = time.monotonic()
                try:
                    ok = client.get(self.server.url + "/health").status_code == 200
                except httpx.HTTPError:
                    ok = False
                self.latencies.append(time.monotonic() - t0)
                self.failures += not ok
                self.stop.wait(0.02)

    def _rss(self) -> None:
        while not self.stop.is_set():
            with contextlib.suppress(OSError, ValueError):
                self.rss_peak = max(self.rss_peak, self.server.rss_mib())
            self.stop.wait(0.05)

    def __enter__(self) -> Watch:
        self.threads = [threading.Thread(target=f, daemon=True) for f in (self._health, self._rss)]
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(10)

    def summary(self) -> str:
        if not self.latencies:
            return "/health: no probe"
        lat = sorted(self.latencies)
        p99 = lat[int(0.99 * (len(lat) - 1))]
        return (
            f"/health p50 {statistics.median(lat) * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, "
            f"max {lat[-1] * 1000:.0f} ms, {self.failures} failed of {len(lat)}"
        )


@dataclass
class Case:
    row: str
    name: str
    args: list[str]
    run: Callable[[Server, Path, float], str]  # returns what the hostile client saw
    setup: Callable[[Path], None] = lambda d: None


def _post(server: Server, path: str, timeout: float, **kw) -> str:
    try:
        r = httpx.post(server.url + path, timeout=timeout, **kw)
    except httpx.TimeoutException:
        return "no answer (timeout)"
    except httpx.HTTPError as exc:
        return type(exc).__name__
    return f"{r.status_code} {r.text[:90]!r}"


def _many(n: int, fn: Callable[[], str]) -> str:
    with concurrent.futures.ThreadPoolExecutor(n) as pool:
        answers = list(pool.map(lambda _: fn(), range(n)))
    counts: dict[str, int] = {}
    for a in answers:
        counts[a[:60]] = counts.get(a[:60], 0) + 1
    return "; ".join(f"{k} x{v}" for k, v in counts.items())


# ---------------------------------------------------------------------------------- cases


def _speech_wav(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["espeak-ng", "-w", str(path), "the secret code is seven four one"], check=True)
    path.chmod(0o600)


def _playlist(server: Server, d: Path, timeout: float) -> str:
    data = b"ffconcat version 1.0\nfile private/memo.wav\n"
    files = {"file": ("a.mp3", data)}
    return _post(
        server, "/v1/audio/transcriptions", timeout, files=files, data={"model": "whisper-1"}
    )


def _fifo_playlists(server: Server, d: Path, timeout: float) -> str:
    data = b"ffconcat version 1.0\nfile private/pipe\n"

    def one() -> str:
        files = {"file": ("a.mp3", data)}
        form = {"model": "whisper-1"}
        return _post(server, "/v1/audio/transcriptions", timeout, files=files, data=form)

    return _many(40, one)


def _flac_bomb(server: Server, d: Path, timeout: float) -> str:
    files = {"file": ("hour.flac", flac_silence(3600))}
    return _post(
        server, "/v1/audio/transcriptions", timeout, files=files, data={"model": "whisper-1"}
    )


def _embeddings(server: Server, d: Path, timeout: float) -> str:
    inputs = ["the quick brown fox jumps"] * 560  # 14 KB
    return _post(server, "/v1/embeddings", timeout, json={"input": inputs, "model": "m"})


def _lora_body(server: Server, d: Path, timeout: float) -> str:
    body = json.dumps([{"id": 0, "scale": 0.5}] * 1_000_000).encode()  # ~25 MiB
    return _post(
        server,
        "/lora-adapters",
        timeout,
        content=body,
        headers={"Content-Type": "application/json"},
    )


def _fifo_slots_setup(d: Path) -> None:
    (d / "slots").mkdir()
    os.mkfifo(d / "slots" / "x.bin")


def _fifo_restores(server: Server, d: Path, timeout: float) -> str:
    def restore() -> str:
        return _post(server, "/slots/0?action=restore", timeout, json={"filename": "x.bin"})

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        restores = [pool.submit(restore) for _ in range(3)]
        time.sleep(1.0)
        chat = _post(
            server, "/v1/chat/completions", timeout, json={"messages": HI, "max_tokens": 1}
        )
        answers = [f.result() for f in restores]
    return f"restores: {answers[0][:50]}; a chat meanwhile: {chat[:40]}"


def _tokenize(server: Server, d: Path, timeout: float) -> str:
    content = "word " * 2_000_000  # 10 MB
    return _post(server, "/tokenize", timeout, json={"content": content, "with_pieces": True})


def _slots_read(server: Server, d: Path, timeout: float) -> str:
    secret = "my bank PIN is 4417"
    _post(
        server,
        "/v1/chat/completions",
        timeout,
        json={"messages": [{"role": "user", "content": secret}], "max_tokens": 4},
    )
    slots = httpx.get(server.url + "/slots", timeout=timeout).text
    return "another client read the prompt" if "4417" in slots else "prompt not shown"


def _slot_saves(server: Server, d: Path, timeout: float) -> str:
    _post(server, "/v1/chat/completions", timeout, json={"messages": HI, "max_tokens": 4})
    answers = []
    for i in range(40):
        answers.append(
            _post(server, "/slots/0?action=save", timeout, json={"filename": f"s{i}.bin"})[:3]
        )
    long_name = _post(server, "/slots/0?action=save", timeout, json={"filename": "n" * 250})
    written = sum(f.stat().st_size for f in (d / "slots").iterdir())
    return (
        f"saves: {', '.join(sorted(set(answers)))}; {written / 2**20:.1f} MiB written; "
        f"a 250-byte name: {long_name[:70]}"
    )


def _idle_connections(server: Server, d: Path, timeout: float) -> str:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    socks = []
    for _ in range(1100):
        try:
            s = socket.create_connection(("127.0.0.1", server.port), timeout=5)
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")  # never finished
            socks.append(s)
        except OSError:
            break
    time.sleep(min(timeout, 15.0))
    ok = 0
    for _ in range(5):
        with contextlib.suppress(httpx.HTTPError):
            ok += httpx.get(server.url + "/health", timeout=5).status_code == 200
    for s in socks:
        s.close()
    return f"{len(socks)} idle half-sent connections held; /health then: {ok}/5 answered"


def _multipart_chat(server: Server, d: Path, timeout: float) -> str:
    body = b"x" * (60 * 2**20)
    t0 = time.monotonic()
    answer = _post(
        server,
        "/v1/chat/completions",
        timeout,
        files={"file": ("a.bin", body)},
    )
    return f"{answer[:60]} after {time.monotonic() - t0:.1f} s"


BASE = ["--parallel", "1", "--threads", "2", "--log-level", "warning"]
CASES = [
    Case(
        "1",
        "ffconcat upload naming a private file",
        BASE,
        _playlist,
        lambda d: _speech_wav(d / "private" / "memo.wav"),
    ),
    Case(
        "1",
        "40 uploads naming a FIFO",
        BASE,
        _fifo_playlists,
        lambda d: (d / "private").mkdir() or os.mkfifo(d / "private" / "pipe"),
    ),
    Case(
        "4", "14 KB of embedding inputs", [*BASE, "--embedding", "--pooling", "mean"], _embeddings
    ),
    Case("5", "a 25 MiB body to /lora-adapters", BASE, _lora_body),
    Case(
        "8",
        "3 restores naming a FIFO, then a chat",
        [*BASE, "--slot-save-path", "slots"],
        _fifo_restores,
        _fifo_slots_setup,
    ),
    Case("10", "a 490 KB FLAC holding 1 h", BASE, _flac_bomb),
    Case("11", "/tokenize of 10 MB", BASE, _tokenize),
    Case("12", "GET /slots after another's chat", BASE, _slots_read),
    Case(
        "13",
        "40 slot saves under new names",
        [*BASE, "--slot-save-path", "slots"],
        _slot_saves,
        lambda d: (d / "slots").mkdir(),
    ),
    Case("14", "1,100 idle half-sent connections", BASE, _idle_connections),
    Case("17", "60 MiB multipart on /v1/chat/completions", BASE, _multipart_chat),
]


def run_case(case: Case, checkout: Path | None, timeout: float) -> None:
    with tempfile.TemporaryDirectory(prefix="hostile-") as tmp:
        d = Path(tmp)
        case.setup(d)
        server = Server(2, case.args, checkout=checkout, cwd=d)
        try:
            time.sleep(1.0)
            idle = server.rss_mib()
            with Watch(server) as watch:
                t0 = time.monotonic()
                got = case.run(server, d, timeout)
                took = time.monotonic() - t0
                time.sleep(0.5)
            alive = "alive" if server.alive else "DEAD"
            print(f"row {case.row:>2} | {case.name}")
            print(f"       got ({took:.1f} s): {got}")
            print(
                f"       {watch.summary()}; RSS peak +{watch.rss_peak - idle:.0f} MiB over "
                f"{idle:.0f} MiB idle; server {alive}",
                flush=True,
            )
        finally:
            server.proc.kill()
            server.proc.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkout", type=Path, help="run this checkout's code instead")
    parser.add_argument("--case-timeout", type=float, default=60.0)
    parser.add_argument("--rows", help="comma-separated rows to run (default: all)")
    args = parser.parse_args()
    rows = set(args.rows.split(",")) if args.rows else None
    for case in CASES:
        if rows is None or case.row in rows:
            run_case(case, args.checkout, args.case_timeout)


if __name__ == "__main__":
    main()
