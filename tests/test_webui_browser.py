"""The web page at `/` in a real Chromium: a user's chat, stop, the reasoning skip button, an
image on a vision model, the API key prompt, the router's model picker, voice through the
realtime socket with a fake microphone, and `/docs` offline. Every page is watched: no
JavaScript error and no request to another host."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
import time
import wave
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from browserkit import launch, watched
from serverkit import LiveServer, hermetic_settings, run_server, serve_app

pytestmark = pytest.mark.slow
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="pip install playwright (the test extra)"
)

ANSWER = "article.assistant:not(.streaming) .meta button[aria-label='Regenerate this answer']"


@pytest.fixture(scope="module")
def playwright() -> Iterator[Any]:
    with sync_api.sync_playwright() as driver:  # one per thread: the tests share it
        yield driver


@pytest.fixture(scope="module")
def browser(playwright) -> Iterator[Any]:
    chromium = launch(playwright)
    yield chromium
    chromium.close()


def ask(page: Any, text: str) -> None:
    page.fill("#input", text)
    page.keyboard.press("Enter")


def set_greedy(page: Any, max_tokens: int) -> None:
    page.click("#settings-open")
    page.fill("input[name=temperature]", "0")
    page.fill("input[name=max_tokens]", str(max_tokens))
    page.click("#settings-form button[value=save]")


@contextlib.contextmanager
def greedy_chat(browser: Any, url: str, max_tokens: int) -> Iterator[Any]:
    """A watched page at `/` whose chat answers greedily, at most `max_tokens` tokens."""
    with watched(browser, url) as w:
        w.page.goto("/")
        set_greedy(w.page, max_tokens)
        yield w.page


def api_answer(live: LiveServer, question: str, max_tokens: int, **extra: Any) -> str:
    body = {"messages": [{"role": "user", "content": question}], "temperature": 0}
    r = httpx.post(
        live.v1 + "/chat/completions", json=body | {"max_tokens": max_tokens} | extra, timeout=120
    )
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["message"]["content"]


def wait_until(check: Any, timeout: float = 60, what: str = "the page") -> None:
    """Poll `check()` from Python (the page's CSP forbids the eval of wait_for_function)."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what} did not come in {timeout} s"
        time.sleep(0.1)


def same_text(shown: str, markdown: str) -> bool:
    """The rendered answer reads as the API's Markdown does (markers aside)."""
    plain = re.sub(r"[*_`#]", "", markdown)
    return " ".join(shown.split()) == " ".join(plain.split())


def last_answer(page: Any) -> str:
    return page.locator("article.assistant .body").last.inner_text().strip()


# ------------------------------------------------------------------------------- chat
def test_a_chat_streams_keeps_its_settings_and_survives_a_reload(browser, server) -> None:
    with greedy_chat(browser, server.url, 24) as page:
        ask(page, "Name a colour.")
        page.wait_for_selector(ANSWER, timeout=60_000)
        shown = last_answer(page)
        # the page sent the chat's settings: greedy, 24 tokens, as the API alone answers
        alone = api_answer(server, "Name a colour.", 24)
        assert same_text(shown, alone)
        meta = page.locator("article.assistant .meta").last.inner_text()
        assert "tokens/s" in meta and "cached" in meta
        page.reload()
        page.wait_for_selector("#conversations button[aria-current=true]")
        assert "Name a colour." in page.inner_text("#conversations")
        assert page.locator("article.user").count() == 1  # kept in IndexedDB


def test_stop_ends_the_answer_and_keeps_what_was_written(browser, server) -> None:
    with greedy_chat(browser, server.url, 2000) as page:
        ask(page, "Write a very long story about a dragon, in many chapters.")
        body = page.locator("article.assistant .body").last
        wait_until(lambda: len(body.inner_text()) > 40, what="a streamed answer")
        page.click("#stop")
        page.wait_for_selector("#send:not([hidden])", timeout=10_000)
        assert "stopped" in page.locator("article.assistant .meta").last.inner_text()
        assert len(last_answer(page)) > 40


def test_regenerate_and_edit_make_branches(browser, server) -> None:
    with greedy_chat(browser, server.url, 8) as page:
        ask(page, "Say one word.")
        page.wait_for_selector(ANSWER, timeout=60_000)
        page.click(ANSWER)
        page.wait_for_selector("article.assistant .meta >> text=2/2", timeout=60_000)
        page.click("article.user .meta button[aria-label='Edit this message']")
        page.fill("article.user textarea", "Say two words.")
        page.click("article.user button[aria-label='Send the edited message']")
        page.wait_for_selector("article.user .meta >> text=2/2", timeout=60_000)
        page.wait_for_selector(ANSWER, timeout=60_000)
        page.click("article.user .meta button[aria-label^='Previous version']")
        assert page.locator("article.user .body").inner_text().strip() == "Say one word."


def test_two_pages_at_once_each_get_their_own_greedy_answer(browser, server) -> None:
    questions = ["Name a fruit.", "Name an animal."]
    with watched(browser, server.url) as a, watched(browser, server.url) as b:
        for w, q in zip((a, b), questions, strict=True):
            w.page.goto("/")
            set_greedy(w.page, 24)
            ask(w.page, q)
        for w in (a, b):
            w.page.wait_for_selector(ANSWER, timeout=90_000)
        for w, q in zip((a, b), questions, strict=True):
            alone = api_answer(server, q, 24)
            assert same_text(last_answer(w.page), alone)


def test_under_an_api_prefix_the_page_and_its_calls_stay_under_it(browser) -> None:
    with run_server(parallel=1, api_prefix="/llm") as live:
        base = live.url  # the server's root; the page lives at /llm/
        bare = httpx.get(base + "/llm")
        assert bare.status_code == 308 and bare.headers["location"] == "/llm/"
        with watched(browser, base) as w:
            page = w.page
            page.goto("/llm")  # redirected to the folder, so relative URLs stay under it
            set_greedy(page, 8)
            ask(page, "Hi")
            page.wait_for_selector(ANSWER, timeout=60_000)
            assert page.url.endswith("/llm/")


def test_keyboard_only_use(browser, server) -> None:
    """Tab reaches the message box; Enter sends; Escape stops; the controls have names."""
    with watched(browser, server.url) as w:
        page = w.page
        page.goto("/")
        for _ in range(30):
            page.keyboard.press("Tab")
            if page.evaluate("() => document.activeElement.id") == "input":
                break
        else:
            raise AssertionError("Tab never reached the message box")
        page.keyboard.type("Write a long poem about the sea.")
        page.keyboard.press("Enter")
        page.locator("#stop").wait_for(timeout=30_000)
        page.keyboard.press("Escape")
        page.wait_for_selector("#send:not([hidden])", timeout=30_000)
        unnamed = page.evaluate(
            """() => [...document.querySelectorAll('button, select, textarea, input')]
                .filter(e => e.offsetParent !== null)
                .filter(e => !(e.getAttribute('aria-label') || e.textContent.trim()
                               || e.labels?.length))
                .map(e => e.outerHTML)"""
        )
        assert unnamed == []
        assert page.get_attribute("#messages", "role") == "log"


# what the model may write, and what the page must make of it (never markup of the model's)
MARKDOWN = [
    ("**bold** and *it* and `code`", ["<strong>bold</strong>", "<em>it</em>", "<code>code</code>"]),
    ("```python\nx = 1\n```", ['<code data-language="python">x = 1</code>', ">Copy</button>"]),
    ("# Title\n\n- one\n- two", ["<h2>Title</h2>", "<ul><li>one</li><li>two</li></ul>"]),
    ("| a | b |\n|---|---|\n| 1 | 2 |", ["<th>a</th>", "<td>2</td>"]),
    ("$\\frac{a}{b}$ and $x^2$", ["<mfrac><mi>a</mi><mi>b</mi></mfrac>", "<msup>"]),
    ("$$\\sqrt{2} \\approx 1.41$$", ['display="block"', "<msqrt>", "≈"]),
    ("$\\unknowncommand{x}$", ["<code>$\\unknowncommand{x}$</code>"]),
    ("<script>alert(1)</script>", ["&lt;script&gt;alert(1)&lt;/script&gt;"]),
    ("<img src=x onerror=alert(1)>", ["&lt;img src=x onerror=alert(1)&gt;"]),
    ("[click](javascript:alert(1))", ["click"]),
    ("[site](https://example.com)", ['href="https://example.com/"', 'rel="noopener noreferrer"']),
]


@pytest.mark.parametrize(("markdown", "expected"), MARKDOWN)
def test_markdown_is_rendered_as_dom_and_never_as_the_models_markup(
    browser, server, markdown, expected
) -> None:
    with watched(browser, server.url) as w:
        w.page.goto("/")
        html = w.page.evaluate(
            """async (text) => {
                const { renderMarkdown } = await import('./webui/markdown.js');
                const box = document.createElement('div');
                box.append(renderMarkdown(text));
                return box.innerHTML;
            }""",
            markdown,
        )
        for piece in expected:
            assert piece in html, html
        assert "<script" not in html and "onerror=" not in html.replace("onerror=alert", "")
        assert "javascript:" not in html.split("href=")[-1] if "href=" in html else True


# -------------------------------------------------------------------------- reasoning
def test_the_skip_button_ends_the_reasoning(browser, thinking_server) -> None:
    with greedy_chat(browser, thinking_server.url, 400) as page:
        ask(page, "Think hard about the meaning of life, then answer.")
        skip = page.locator("button.skip")
        skip.wait_for(timeout=60_000)
        assert page.locator("details.reasoning").first.is_visible()
        skip.click()
        page.wait_for_selector(ANSWER, timeout=60_000)
        assert page.locator("button.skip").count() == 0  # only while the model reasons
        assert (page.locator("details.reasoning .text").last.text_content() or "").strip()
        # the answer then ran to its end (ANSWER: the streaming class is gone); its text may
        # be empty: where the click cuts the reasoning decides whether SmolLM2 says anything
        # after the forced close (a fresh-clone CI run saw it end at once)


# ---------------------------------------------------------------------------- the key
def test_the_page_asks_for_the_key_once_and_keeps_it(browser) -> None:
    with run_server(parallel=1, api_key="sesame") as live:
        assert httpx.get(live.url + "/").status_code == 200  # the page loads without a key
        assert httpx.get(live.url + "/v1/models").status_code == 401
        with watched(browser, live.url, expected_errors=("401",)) as w:
            page = w.page
            page.goto("/")
            page.wait_for_selector("#key-dialog[open]")
            page.fill("#key-form input[name=key]", "wrong")
            page.click("#key-form button[type=submit]")
            page.wait_for_selector("#key-error:not([hidden])")
            assert "refused" in page.inner_text("#key-error")
            page.fill("#key-form input[name=key]", "sesame")
            page.click("#key-form button[type=submit]")
            page.wait_for_selector("#key-dialog[open]", state="detached")
            set_greedy(page, 8)
            ask(page, "Hi")
            page.wait_for_selector(ANSWER, timeout=60_000)
            page.reload()
            page.wait_for_timeout(500)
            assert page.locator("#key-dialog[open]").count() == 0  # kept in the browser


# ------------------------------------------------------------------------------ images
@pytest.fixture(scope="module")
def vision(tmp_path_factory) -> Iterator[LiveServer]:
    from llamactl.converters import convert
    from llamactl.server.app import create_app
    from synthetic_checkpoints import cached, write_chat_copy

    out = tmp_path_factory.mktemp("webui_vlm")
    proj = convert(cached(tmp_path_factory, "lfm2-d1"), out / "d1.gguf", mmproj=True).outfile
    trunk = convert(cached(tmp_path_factory, "lfm2-d1"), out / "decision.gguf").outfile
    chat = write_chat_copy(trunk, out / "chat.gguf")
    settings = hermetic_settings({"model": str(chat), "parallel": 2, "threads": 2})
    with serve_app(create_app(settings, model_path=chat, mmproj=proj), settings) as live:
        yield live


def attach_picture(page: Any, folder: Path) -> None:
    """Choose a small PNG in the page's file picker (as a user's Attach does)."""
    from imagekit import png

    image = folder / "picture.png"
    image.write_bytes(png(64, 48, 1))
    page.set_input_files("#file", str(image))


def test_an_image_goes_to_a_vision_model(browser, vision, tmp_path) -> None:
    with greedy_chat(browser, vision.url, 8) as page:
        attach_picture(page, tmp_path)
        page.wait_for_selector("#attachments .chip")
        ask(page, "What is in the picture?")
        page.wait_for_selector(ANSWER, timeout=60_000)
        assert page.locator("article.user img.attachment").count() == 1
        assert page.locator("article.assistant .error").count() == 0
        cached_line = page.locator("article.assistant .meta").last.inner_text()
        assert "tokens/s" in cached_line


def test_a_text_only_model_says_it_cannot_see(browser, server, tmp_path) -> None:
    with watched(browser, server.url) as w:
        page = w.page
        page.goto("/")
        wait_until(lambda: "text only" in (page.get_attribute("#attach", "title") or ""))
        attach_picture(page, tmp_path)
        page.wait_for_selector("#notice:not([hidden])")
        assert "cannot see images" in page.inner_text("#notice")
        assert page.locator("#attachments .chip").count() == 0


# ------------------------------------------------------------------------------ router
@contextlib.contextmanager
def router(tmp: Path) -> Iterator[str]:
    """A router over two presets of the embedded model, both unloaded at start."""
    from llamactl.server.router.app import create_router_app

    from llamactl.models import embedded_model_path

    preset = tmp / "models.toml"
    model = embedded_model_path()
    preset.write_text(
        f'[first]\nmodel = "{model}"\nctx_size = 1024\nparallel = 1\n\n'
        f'[second]\nmodel = "{model}"\nctx_size = 1024\nparallel = 1\n'
    )
    settings = hermetic_settings({"models_preset": str(preset), "threads": 1})
    launcher = (sys.executable, "-m", "llamactl")
    app = create_router_app(settings, launcher=launcher, load_timeout=60)
    with serve_app(app, settings) as live:
        yield live.url


def test_the_router_picker_shows_status_and_loads_on_demand(browser, tmp_path) -> None:
    with router(tmp_path) as url, watched(browser, url) as w:
        page = w.page
        page.goto("/")
        picker = page.locator("#model-picker")
        picker.wait_for()
        options = page.locator("#model-picker option").all_inner_texts()
        assert options == ["first (unloaded)", "second (unloaded)"]
        picker.select_option("second")
        options = page.locator("#model-picker option")
        wait_until(lambda: "second (loaded)" in options.all_inner_texts(), 90, "the load")
        set_greedy(page, 8)
        ask(page, "Hi")
        page.wait_for_selector(ANSWER, timeout=60_000)
        assert page.locator("article.assistant .role").last.inner_text() == "second"
        models = {
            m["id"]: m["status"]["value"] for m in httpx.get(url + "/v1/models").json()["data"]
        }
        assert models == {"first": "unloaded", "second": "loaded"}


# ------------------------------------------------------------------------------- voice
def pad_with_silence(path: Path, seconds: float) -> None:
    with wave.open(str(path)) as src:
        params, frames = src.getparams(), src.readframes(src.getnframes())
    pause = b"\0" * (params.sampwidth * params.nchannels * int(params.framerate * seconds))
    with wave.open(str(path), "wb") as out:
        out.setparams(params)
        out.writeframes(pause + frames + pause)


def test_voice_through_the_realtime_socket_with_a_fake_microphone(
    playwright, server, tmp_path
) -> None:
    speech = tmp_path / "question.wav"
    said = subprocess.run(
        [
            sys.executable,
            "-m",
            "llamactl",
            "tts",
            "What is the capital of France?",
            "-o",
            str(speech),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert said.returncode == 0, said.stderr
    pad_with_silence(speech, seconds=2.0)  # Chromium loops the file: the pause ends the turn
    fake_mic = (
        "--use-fake-ui-for-media-stream",
        "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={speech}",
        "--autoplay-policy=no-user-gesture-required",
    )
    if True:  # a Chromium of its own: the fake microphone is a launch flag
        chromium = launch(playwright, *fake_mic)
        try:
            with watched(chromium, server.url) as w:
                page = w.page
                page.context.grant_permissions(["microphone"])
                page.goto("/")
                page.click("#talk")
                page.wait_for_selector("#voice-log .you", timeout=90_000)
                heard = page.locator("#voice-log .you").first.inner_text().lower()
                assert "capital" in heard or "france" in heard, heard
                page.wait_for_selector("#voice-log .assistant", timeout=90_000)
                said_back = page.locator("#voice-log .assistant").first
                wait_until(lambda: len(said_back.inner_text()) > 3, what="the spoken answer")
                assert page.get_attribute("#talk", "aria-pressed") == "true"
                page.click("#talk")
                assert page.inner_text("#voice-state") == "Voice off"
        finally:
            chromium.close()


# -------------------------------------------------------------------------------- docs
def test_the_api_docs_render_offline(browser, server) -> None:
    with watched(browser, server.url) as w:
        page = w.page
        page.goto("/docs")
        page.wait_for_selector(".swagger-ui .info .title", timeout=30_000)
        assert "llamactl" in page.inner_text(".swagger-ui .info .title")
    # ReDoc 2.x draws its footer logo from cdn.redoc.ly whatever its options: the page's CSP
    # blocks it before any byte leaves (the docs render without it)
    logo = ("cdn.redoc.ly",)
    with watched(browser, server.url, expected_errors=logo, expected_hosts=logo) as w:
        w.page.goto("/redoc")
        w.page.wait_for_selector(".api-content h1", timeout=30_000)
        assert "llamactl" in w.page.inner_text(".api-content h1")


def test_no_webui_turns_the_page_off() -> None:
    with run_server(parallel=1, webui=False) as live:
        assert httpx.get(live.url + "/").status_code == 404
        assert httpx.get(live.url + "/webui/app.js").status_code == 404
        assert httpx.get(live.url + "/health").status_code == 200


def test_the_page_keeps_to_this_server() -> None:
    with run_server(parallel=1) as live:
        r = httpx.get(live.url + "/")
        assert r.status_code == 200 and "default-src 'self'" in r.headers["content-security-policy"]
        assert json.dumps(r.text).count("http") == 0  # no absolute URL in the page
