"""Take the screenshots docs/webui.md shows: the web page in Debian's Chromium, against real
llamactl servers (the embedded model; a <think> template for the reasoning state), written to
docs/images/webui-*.png. Run it alone (it loads models): `python scripts/webui_screenshots.py`.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from browserkit import launch  # noqa: E402
from playwright.sync_api import sync_playwright  # noqa: E402
from serverkit import THINK_TEMPLATE, run_server  # noqa: E402

OUT = ROOT / "docs" / "images"
SIZE = {"width": 1100, "height": 640}


def shot(page, name: str) -> None:
    path = OUT / f"webui-{name}.png"
    page.screenshot(path=str(path))
    print(f"wrote {path.relative_to(ROOT)}")


def ask(page, text: str, settle: str | None = None) -> None:
    page.fill("#input", text)
    page.keyboard.press("Enter")
    if settle:
        page.wait_for_selector(settle, timeout=120_000)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    done = "article.assistant .meta button[aria-label='Regenerate this answer']"
    with sync_playwright() as playwright:
        browser = launch(playwright)
        with run_server(parallel=2) as live:
            page = browser.new_page(viewport=SIZE)
            page.goto(live.url + "/")
            page.click("#settings-open")
            page.fill("input[name=temperature]", "0")
            page.fill("input[name=max_tokens]", "120")
            shot(page, "settings")
            page.click("#settings-form button[value=save]")
            ask(page, "Write a Python function that adds two numbers, with an example.", done)
            shot(page, "chat")
            page.click("#theme")
            shot(page, "dark")
            page.click("#theme")
            page.close()
        with run_server(parallel=1, chat_template_file=str(THINK_TEMPLATE)) as live:
            page = browser.new_page(viewport=SIZE)
            page.goto(live.url + "/")
            ask(page, "Think about why the sky is blue, then answer.", "button.skip")
            time.sleep(1.5)
            shot(page, "reasoning")
            page.close()
        with run_server(parallel=1, api_key="sesame") as live:
            page = browser.new_page(viewport=SIZE)
            page.goto(live.url + "/")
            page.wait_for_selector("#key-dialog[open]")
            shot(page, "key")
            page.close()
        browser.close()


if __name__ == "__main__":
    main()
