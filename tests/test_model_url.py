"""`--model-url URL` (llama-server's `-mu`): a GGUF downloaded at start into the models dir,
kept for the next start (which then needs no network), with the URL's hostile cases refused
before anything is kept."""

from __future__ import annotations

import http.server
import json
import shutil
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from llamactl.cli.main import app
from llamactl.core.errors import DownloadError
from llamactl.hub import fetch_url, url_target
from llamactl.models import embedded_model_path


class Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        if self.path == "/truncated.gguf":  # says 1 MiB, sends 8 bytes, hangs up
            self.send_response(200)
            self.send_header("Content-Length", str(1 << 20))
            self.end_headers()
            self.wfile.write(b"GGUF\x03\x00\x00\x00")
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        super().do_GET()


@pytest.fixture
def files(tmp_path: Path) -> Iterator[str]:
    """A web server over a folder holding the embedded GGUF and a page that is not one."""
    root = tmp_path / "www"
    root.mkdir()
    model = embedded_model_path()
    assert model is not None
    (root / "small.gguf").symlink_to(model)
    (root / "page.gguf").write_text("<html>not a model</html>")
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), lambda *a: Handler(*a, directory=str(root))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.slow
def test_chat_with_a_model_url_downloads_once_then_works_offline(files: str, isolated_dirs) -> None:
    args = ["chat", "-mu", f"{files}/small.gguf", "Hi", "--json", "--temp", "0", "-n", "4"]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    port = files.rsplit(":", 1)[1]
    assert json.loads(first.stdout)["model"] == f"127.0.0.1_{port}/small"
    kept = isolated_dirs.models_dir / f"127.0.0.1_{port}" / "small.gguf"
    assert kept.stat().st_size == embedded_model_path().stat().st_size  # type: ignore[union-attr]
    assert not list(kept.parent.glob("*.part"))
    second = CliRunner().invoke(app, args)  # the kept copy: same model, same greedy answer
    assert second.exit_code == 0, second.output
    one, two = json.loads(first.stdout), json.loads(second.stdout)
    assert (two["model"], two["text"]) == (one["model"], one["text"])


def test_the_kept_copy_is_used_without_the_network(tmp_path: Path) -> None:
    url = "http://127.0.0.1:9/m/small.gguf"  # nothing listens on port 9
    target = url_target(url, tmp_path)
    target.parent.mkdir(parents=True)
    shutil.copy(embedded_model_path(), target)  # type: ignore[arg-type]
    assert fetch_url(url, tmp_path) == target


HOSTILE = [
    ("ftp://example.com/m.gguf", "not an http\\(s\\) URL"),
    ("file:///etc/passwd", "not an http\\(s\\) URL"),
    ("http:///m.gguf", "not an http\\(s\\) URL"),
    ("{base}/dir/", "names no file"),
    ("{base}/%2E%2E%2F%2E%2E%2Fescape.gguf", "would leave the models directory"),
    ("{base}/..%2Fescape.gguf", "would leave the models directory"),
    ("{base}/a%00b.gguf", "NUL"),
    ("{base}/a%5Cb.gguf", "backslash"),
    ("{base}/missing.gguf", "answered HTTP 404"),
    ("{base}/page.gguf", "is not a GGUF file"),
    ("{base}/truncated.gguf", "broke off"),
    ("http://127.0.0.1:9/m.gguf", "broke off"),  # nothing listening
]


@pytest.mark.parametrize(("url", "said"), HOSTILE)
def test_a_bad_model_url_is_refused_and_nothing_is_kept(files, tmp_path, url, said) -> None:
    models = tmp_path / "models"
    with pytest.raises(DownloadError, match=said):
        fetch_url(url.format(base=files), models)
    kept = [p for p in models.rglob("*") if p.is_file()] if models.exists() else []
    assert all(p.name.endswith(".part") for p in kept)  # only a resumable part, never a model
    assert not (tmp_path / "escape.gguf").exists()


def test_a_bad_model_url_is_a_clean_cli_error(files: str) -> None:
    result = CliRunner().invoke(app, ["chat", "-mu", f"{files}/page.gguf", "Hi"])
    assert result.exit_code == 1
    assert "is not a GGUF file" in result.stderr and "Traceback" not in result.output
