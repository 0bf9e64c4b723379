"""The in-process server `llamactl tui` starts when it is given no --url.

It is the same app as `llamactl serve` (create_app, uvicorn), on 127.0.0.1 and a free port,
run on a thread of this process. Its logs go to a file under the XDG state dir: the terminal
belongs to the TUI. It is ready when /health says so; `stop()` ends the generations in flight
and joins the thread.
"""

from __future__ import annotations

import dataclasses
import logging
import socket
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from llamactl import LocalServerError, state_dir

LOG_NAME = "tui-server.log"
HOST = "127.0.0.1"


def log_path() -> Path:
    return state_dir() / LOG_NAME


class LocalServer:
    """`with LocalServer(settings) as url:` serves on a free port until the block ends."""

    def __init__(
        self, settings: Any, *, model_path: Path | None = None, log_file: Path | None = None
    ) -> None:
        self.settings = settings
        self.model_path = model_path
        self.log_file = Path(log_file) if log_file else log_path()
        self._root_level: int | None = None
        self.app: Any = None
        self.url: str | None = None
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._handler: logging.Handler | None = None

    def start(self, timeout: float = 300.0) -> str:
        import uvicorn
        from llamactl.server.app import create_app
        from llamactl.server.edge.uvicorn_options import uvicorn_options

        self._log_to_file()
        # It listens on loopback whatever `host` says, and its Host check must know that.
        settings = dataclasses.replace(self.settings, host=HOST)
        self.app = create_app(settings, model_path=self.model_path)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind((HOST, 0))
        port = sock.getsockname()[1]
        options = uvicorn_options(
            settings,
            port=port,
            log_config=None,  # keep the root logger's file handler; nothing on the terminal
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=2,
        )
        config = uvicorn.Config(self.app, **options)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name="tui-server", daemon=True
        )
        self._thread.start()
        self.url = url = f"http://{HOST}:{port}"
        self._wait_ready(url, timeout)
        return url

    def _wait_ready(self, url: str, timeout: float) -> None:
        state = self.app.state.llamactl
        deadline = time.monotonic() + timeout
        while True:
            if state.load_error is not None:
                self.stop()
                raise LocalServerError(
                    f"the local server could not load the model: {state.load_error}"
                )
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self._thread is None or not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise LocalServerError(f"the local server did not start (see {self.log_file})")
            time.sleep(0.05)

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            # open streams end now instead of after the grace period
            self.app.state.llamactl.stop_generating()
            server.should_exit = True
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=30)
        if self._handler is not None:
            root = logging.getLogger()
            root.removeHandler(self._handler)
            if self._root_level is not None:
                root.setLevel(self._root_level)
            self._handler.close()
            self._handler = None

    def _log_to_file(self) -> None:
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(self.log_file, encoding="utf-8")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root = logging.getLogger()
        root.addHandler(handler)
        self._root_level = root.level
        if root.level == logging.NOTSET or root.level > logging.INFO:
            root.setLevel(logging.INFO)
        self._handler = handler

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
