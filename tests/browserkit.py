"""A real Chromium (Debian's `chromium`, driven by Playwright for Python) for the web page's
tests. Every page records what would make a user's day worse: a JavaScript error, a console
error, a request to any host but the server's. `watched` asserts there were none."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import pytest

CHROMIUM = os.environ.get("LLAMACTL_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"


def launch(playwright: Any, *extra_args: str) -> Any:
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"no Chromium at {CHROMIUM}: `apt-get install chromium` (install-system-deps)")
    return playwright.chromium.launch(
        executable_path=CHROMIUM, args=["--no-sandbox", "--disable-dev-shm-usage", *extra_args]
    )


@dataclass
class Watched:
    page: Any
    host: str
    errors: list[str] = field(default_factory=list)
    elsewhere: list[str] = field(default_factory=list)

    def check(self) -> None:
        assert not self.errors, f"JavaScript errors: {self.errors}"
        assert not self.elsewhere, f"requests to other hosts: {self.elsewhere}"


@contextlib.contextmanager
def watched(
    browser: Any,
    base_url: str,
    expected_errors: tuple[str, ...] = (),
    expected_hosts: tuple[str, ...] = (),
) -> Iterator[Watched]:
    """A fresh page (its own storage) that records errors and foreign requests (but those
    naming `expected_errors` / going to `expected_hosts`)."""
    context = browser.new_context(base_url=base_url)
    page = context.new_page()
    seen = Watched(page, urlsplit(base_url).netloc)

    def console(message: Any) -> None:
        if message.type == "error" and not any(e in message.text for e in expected_errors):
            seen.errors.append(message.text)

    def request(req: Any) -> None:
        parts = urlsplit(req.url)
        foreign = parts.netloc not in (seen.host, *expected_hosts)
        if parts.scheme in ("http", "https", "ws", "wss") and foreign:
            seen.elsewhere.append(req.url)

    page.on("pageerror", lambda e: seen.errors.append(str(e)))
    page.on("console", console)
    page.on("request", request)
    page.on("websocket", lambda ws: request(ws))
    try:
        yield seen
        seen.check()
    finally:
        context.close()
