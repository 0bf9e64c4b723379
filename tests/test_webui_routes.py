"""The web page's routes over real HTTP, without a browser: `/` and `/webui/NAME` are public
(no data in them; the page asks for the key), served while the model loads, under
`--api-prefix`, and in router mode; only the shipped files answer, with their types and a
Content-Security-Policy; hostile names are 404s; `--no-webui` turns them off."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from llamactl.server.webui import routes
from test_docs_offline import raw_get, serve_unloaded

STATIC = Path(routes.__file__).with_name("static")


@pytest.fixture(scope="module", params=["plain", "prefixed", "keyed"])
def base(request: pytest.FixtureRequest) -> Iterator[str]:
    overrides = {"prefixed": {"api_prefix": "/x"}, "keyed": {"api_key": "s3cret"}}
    with serve_unloaded(**overrides.get(request.param, {})) as url:
        yield url


def test_the_page_and_every_file_it_names_answer_without_a_key(base: str) -> None:
    page = httpx.get(base + "/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "default-src 'self'" in page.headers["content-security-policy"]
    named = re.findall(r'(?:src|href)="(webui/[^"]+)"', page.text)
    assert {"webui/app.js", "webui/style.css", "webui/icon.svg"} <= set(named)
    for name in STATIC.iterdir():
        r = httpx.get(f"{base}/webui/{name.name}")
        assert r.status_code == 200, name
        assert r.content == name.read_bytes()
        assert r.headers["x-content-type-options"] == "nosniff"
    assert httpx.get(base + "/webui/app.js").headers["content-type"].startswith("text/javascript")


def test_the_api_still_needs_the_key() -> None:
    with serve_unloaded(api_key="s3cret") as url:
        assert httpx.get(url + "/").status_code == 200
        assert httpx.get(url + "/openapi.json").status_code == 401  # (the API: 503 till loaded)


def test_every_module_the_page_imports_is_shipped() -> None:
    """Plain ES modules, no build step: each import names a file in static/."""
    for script in STATIC.glob("*.js"):
        for imported in re.findall(r'from "\./([^"]+)"', script.read_text()):
            assert (STATIC / imported).is_file(), f"{script.name} imports {imported}"
    shipped = "".join(p.read_text() for p in STATIC.iterdir())
    # nothing from another host (the SVG and MathML namespaces are names, not requests)
    assert not re.search(r"https?://(?!www\.w3\.org/)", shipped)


HOSTILE = {
    "dot segments": "/webui/../app.py",
    "encoded traversal": "/webui/%2e%2e%2froutes.py",
    "encoded traversal, deeper": "/webui/%2e%2e%2f%2e%2e%2f%2e%2e%2fpyproject.toml",
    "encoded backslashes": "/webui/..%5croutes.py",
    "absolute path": "/webui//etc/passwd",
    "encoded absolute path": "/webui/%2fetc%2fpasswd",
    "very long name": "/webui/" + "a" * 20_000,
    "NUL": "/webui/app.js%00",
    "not shipped": "/webui/routes.py",
    "the vendor folder": "/webui/vendor",
    "case": "/webui/APP.JS",
    "the folder": "/webui/",
}


@pytest.mark.parametrize("target", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_file_names_are_404(base: str, target: str) -> None:
    status, body = raw_get(base, target)
    assert status == 404, body[:200]
    assert json.loads(body)["error"]["type"] == "not_found_error"


def test_no_webui_leaves_nothing_at_slash() -> None:
    with serve_unloaded(webui=False) as url:
        assert httpx.get(url + "/").status_code == 404
        assert httpx.get(url + "/webui/app.js").status_code == 404
        assert "--no-webui" in httpx.get(url + "/").json()["error"]["message"]
