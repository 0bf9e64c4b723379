"""Every route of the server against the same hostile requests (issue 31).

The table is built from the app's own route table, so a route added tomorrow is covered without
anyone remembering to add it here: each (method, path) gets every case that applies to it (huge
bodies, deep and wide JSON, wrong types, lone surrogates, bad UTF-8, truncated JSON, NaN and
overflowing numbers, a multipart or form body where JSON is expected, a body on GET, garbage
query strings, a client that hangs up mid-body). Every answer must be a 4xx in the API family's
error shape (or a 2xx where the route ignores what it was sent; 501 where the service is not
loaded), never a 5xx, a hang or a dropped connection; while the table runs, `/health` is asked
every 25 ms and must always answer; the process's memory must stay bounded.

The upload routes (those whose OpenAPI body is multipart) also get the file-borne cases: a
playlist naming a file of the server's disk, a FIFO, a decompression bomb, a truncated file, a
file of the wrong type.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from audiokit import flac_silence
from serverkit import AppRoute, LiveServer, app_routes, run_server

MODEL_FIXTURES = {"hostile"}

MAX_BODY_MIB = 2  # the server's --max-body-size here: "huge" is just past it
FILLERS = {
    "{response_id}": "resp_hostile",
    "{id_slot}": "0",
    "{name}": "app.js",  # the web page's files
}
ROOT = Path(__file__).resolve().parent.parent
DOCS_ROUTES = {"/openapi.json", "/docs", "/redoc", "/docs/assets/{name:path}"}
# the web page (server/webui): for browsers, not the API, so not in the OpenAPI document
PAGE_ROUTES = {"/", "/webui/{name}"}


# ------------------------------------------------------------------------ the server and probe


@dataclass
class HealthProbe:
    """Asks /health every 25 ms on its own connection; records each latency or failure."""

    url: str
    latencies: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        with httpx.Client(timeout=30) as client:
            while not self.stop.is_set():
                t0 = time.monotonic()
                try:
                    status = client.get(self.url + "/health").status_code
                except httpx.HTTPError as exc:
                    self.failures.append(f"{type(exc).__name__}: {exc}")
                else:
                    if status != 200:
                        self.failures.append(f"status {status}")
                self.latencies.append(time.monotonic() - t0)
                self.stop.wait(0.025)


def rss_mib() -> float:
    """This process's resident memory (the server runs in it)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


@dataclass
class Hostile:
    live: LiveServer
    probe: HealthProbe
    rss_start: float
    rss_peak: float = 0.0


@pytest.fixture(scope="module")
def slot_dir(tmp_path_factory) -> Path:
    """The server's --slot-save-path, holding what a hostile restore would name."""
    import struct

    from llamactl.engine.state_file import MAGIC

    d = tmp_path_factory.mktemp("slots")
    (d / "huge-header.bin").write_bytes(MAGIC + struct.pack("<I", 0xFFFFFFFF) + b"{}")
    (d / "magic-only.bin").write_bytes(MAGIC)
    (d / "not-a-state.bin").write_bytes(b"ffconcat version 1.0\nfile /etc/passwd\n")
    for prefix in ("", "save-"):  # saves replace what they name: their own copies
        (d / f"{prefix}dir.bin").mkdir()
        (d / f"{prefix}link.bin").symlink_to("/etc/passwd")
    os.mkfifo(d / "fifo.bin")
    os.mkfifo(d / "save-fifo.bin")
    return d


@pytest.fixture(scope="module")
def hostile(slot_dir: Path) -> Iterator[Hostile]:
    with run_server(
        parallel=1,
        max_body_size=MAX_BODY_MIB,
        body_timeout=5.0,
        slot_save_path=str(slot_dir),
        embedding=True,  # /v1/embeddings and /embedding read their bodies, not 501
    ) as live:
        httpx.post(  # warm up: the first chat loads what later ones reuse
            live.v1 + "/chat/completions",
            json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1},
            timeout=120,
        )
        probe = HealthProbe(live.url)
        thread = threading.Thread(target=probe.run, daemon=True)
        thread.start()
        state = Hostile(live, probe, rss_mib())
        try:
            yield state
        finally:
            probe.stop.set()
            thread.join(timeout=30)


# ------------------------------------------------------------------------------- the routes


def _routes() -> list[AppRoute]:
    """The app's routes, built without a model (`create_app` loads lazily)."""
    from llamactl.server.app import create_app
    from serverkit import hermetic_settings

    return app_routes(create_app(hermetic_settings({})))


ROUTES = _routes()
HTTP_ROUTES = [r for r in ROUTES if not r.websocket and r.path not in DOCS_ROUTES]


def concrete(path: str) -> str:
    for name, value in FILLERS.items():
        path = path.replace(name, value)
    assert "{" not in path, f"add a filler for {path}'s path parameter to FILLERS"
    return path


def _upload_paths() -> set[str]:
    spec = json.loads((ROOT / "docs" / "openapi.json").read_text())
    return {
        path
        for path, ops in spec["paths"].items()
        for op in ops.values()
        if "multipart/form-data" in op.get("requestBody", {}).get("content", {})
    }


UPLOAD_PATHS = _upload_paths()


def is_upload(route: AppRoute) -> bool:
    """An upload route, or an alias of one (the same endpoint under another path)."""
    canonical = {r.path for r in ROUTES if r.endpoint is route.endpoint and r.in_schema}
    return bool((canonical | {route.path}) & UPLOAD_PATHS)


# -------------------------------------------------------------------------------- the cases


@dataclass(frozen=True)
class Case:
    name: str
    body: Callable[[], bytes] | None
    content_type: str = "application/json"
    applies: Callable[[AppRoute], bool] = lambda r: r.method in ("POST", "PUT", "PATCH")
    query: str = ""


def _deep(n: int) -> bytes:
    return b"[" * n + b"]" * n


def _wide(n_bytes: int) -> bytes:
    return b"[" + b"0," * (n_bytes // 2) + b"0]"


def _multipart() -> tuple[bytes, str]:
    boundary = "hostileboundary"
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        + b"\x00" * 4096
        + f"\r\n--{boundary}--\r\n".encode()
    )
    return body, f"multipart/form-data; boundary={boundary}"


MULTIPART_BODY, MULTIPART_TYPE = _multipart()
WRONG_FIELDS = {
    k: v
    for k, v in {
        "model": [],
        "messages": 5,
        "input": {"a": 1},
        "prompt": {},
        "content": [],
        "tokens": "x",
        "max_tokens": "many",
        "n_probs": [],
        "stream": "yes",
        "documents": 3,
        "lora": "x",
    }.items()
}
SURROGATE = (
    b'{"model": "\\ud800", "messages": [{"role": "user", "content": "\\ud800"}], '
    b'"input": "\\udfff", "prompt": "\\ud800", "content": "\\ud800", "text": "\\ud800"}'
)

CASES = [
    Case("deep JSON, small", lambda: _deep(100_000)),
    Case("deep JSON, over 1 MiB", lambda: _deep(600_000)),
    Case("wide JSON, over 1 MiB", lambda: _wide(1_500_000)),
    Case("a JSON array", lambda: b"[]"),
    Case("a JSON number", lambda: b"1e999"),
    Case("a JSON string", lambda: b'"hostile"'),
    Case("JSON null", lambda: b"null"),
    Case("an empty body", lambda: b""),
    Case("fields of the wrong types", lambda: json.dumps(WRONG_FIELDS).encode()),
    Case("lone surrogates", lambda: SURROGATE),
    Case("invalid UTF-8", lambda: b'{"prompt": "\xff\xfe\xfd", "content": "\xc3"}'),
    Case("truncated JSON", lambda: b'{"messages": [{"role": "user", "content": "hi'),
    Case(
        "NaN and overflowing numbers",
        lambda: (
            b'{"temperature": NaN, "max_tokens": 1e400, "n": 99999999999999999999999999,'
            b' "seed": -1e308, "top_k": Infinity, "id_slot": 18446744073709551617}'
        ),
    ),
    Case("a multipart body", lambda: MULTIPART_BODY, MULTIPART_TYPE),
    Case("a form body", lambda: b"messages=1&prompt=2", "application/x-www-form-urlencoded"),
    Case(  # a route that reads it as JSON generates: one token, not a full context
        "text/plain", lambda: b'{"prompt": "hi", "n_predict": 1, "max_tokens": 1}', "text/plain"
    ),
    Case(
        "a body on GET or DELETE",
        lambda: b'{"hostile": true}',
        applies=lambda r: r.method in ("GET", "DELETE"),
    ),
    Case(
        "a garbage query string",
        None,
        applies=lambda r: True,
        query="?fail_on_no_slot=NaN&action=%FF%FE&model=%00&limit=-1&x=" + "y" * 4000,
    ),
]


def _raw(live: LiveServer, method: str, target: str, headers: dict[str, str], body: bytes):
    """One request on a raw socket (httpx refuses some of what a hostile client sends);
    returns (status, body) or raises when the server drops the connection."""
    port = int(live.url.rsplit(":", 1)[1])
    head = f"{method} {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        sock.sendall(head.encode("latin-1") + b"\r\n")
        # the server may answer before reading the body: then read its answer
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(body)
        data = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            data += chunk
    head_bytes, _, payload = data.partition(b"\r\n\r\n")
    match = re.match(rb"HTTP/1\.[01] (\d{3})", head_bytes)
    assert match, f"no HTTP answer: {data[:200]!r}"
    if b"transfer-encoding: chunked" in head_bytes.lower():
        payload = _dechunk(payload)
    return int(match.group(1)), payload


def _dechunk(data: bytes) -> bytes:
    out = b""
    while data:
        size_line, _, rest = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0] or b"0", 16)
        if size == 0:
            break
        out += rest[:size]
        data = rest[size + 2 :]
    return out


def check_answer(route: AppRoute, case: str, status: int, payload: bytes) -> None:
    where = f"{route.method} {route.path} with {case}"
    assert status < 500 or status == 501, f"{where}: {status} {payload[:300]!r}"
    if status >= 400:
        try:
            body = json.loads(payload)
        except ValueError:
            pytest.fail(f"{where}: {status} with a body that is not JSON: {payload[:200]!r}")
        assert isinstance(body, dict) and "error" in body, f"{where}: {body}"


TABLE = [
    pytest.param(route, case, id=f"{route.method} {route.path} | {case.name}")
    for route in HTTP_ROUTES
    for case in CASES
    if case.applies(route)
]


def send_case(live: LiveServer, route: AppRoute, case: Case) -> None:
    body = case.body() if case.body is not None else b""
    headers = {"Content-Length": str(len(body))}
    if case.body is not None:
        headers["Content-Type"] = case.content_type
    status, payload = _raw(live, route.method, concrete(route.path) + case.query, headers, body)
    check_answer(route, case.name, status, payload)


@pytest.mark.parametrize(("route", "case"), TABLE)
def test_hostile_request(hostile: Hostile, route: AppRoute, case: Case) -> None:
    send_case(hostile.live, route, case)
    hostile.rss_peak = max(hostile.rss_peak, rss_mib())


# Router mode: the router's own routes, and every route of a model server, which the router
# reads (for the model's name) before it proxies to a child.


def _router_routes() -> list[AppRoute]:
    import tempfile

    from llamactl.server.router import create_router_app
    from serverkit import hermetic_settings

    with tempfile.TemporaryDirectory() as empty:
        app = create_router_app(hermetic_settings({"models_dir": empty}))
    own = [r for r in app_routes(app) if not r.websocket and r.path not in DOCS_ROUTES]
    paths = {(r.method, r.path) for r in own}
    return own + [r for r in HTTP_ROUTES if (r.method, r.path) not in paths]


ROUTER_TABLE = [
    pytest.param(route, case, id=f"router {route.method} {route.path} | {case.name}")
    for route in _router_routes()
    for case in CASES
    if case.applies(route)
]


@pytest.fixture(scope="module")
def hostile_router(tmp_path_factory) -> Iterator[LiveServer]:
    """A router over the embedded model (a child starts on the first request naming it)."""
    from llamactl.server.router import create_router_app
    from serverkit import hermetic_settings, serve_app

    preset = tmp_path_factory.mktemp("router") / "models.toml"
    preset.write_text(f'[small]\nmodel = "{embedded()}"\nctx_size = 512\nparallel = 1\n')
    settings = hermetic_settings(
        {"models_preset": str(preset), "threads": 1, "max_body_size": MAX_BODY_MIB}
    )
    app = create_router_app(settings, load_timeout=60)
    with serve_app(app, settings) as live:
        yield live


def embedded() -> str:
    from llamactl.models import embedded_model_path

    return str(embedded_model_path())


@pytest.mark.parametrize(("route", "case"), ROUTER_TABLE)
def test_hostile_request_to_the_router(
    hostile: Hostile, hostile_router: LiveServer, route: AppRoute, case: Case
) -> None:
    send_case(hostile_router, route, case)


BODY_ROUTES = [r for r in HTTP_ROUTES if r.method in ("POST", "PUT", "PATCH")]


@pytest.mark.parametrize("route", BODY_ROUTES, ids=lambda r: f"{r.method} {r.path}")
def test_huge_bodies_are_413_without_reading_them(hostile: Hostile, route: AppRoute) -> None:
    """Declared too long: refused before a byte of the body is read. Sent chunked: refused at
    the limit. Uploads have their own, larger limit: a declared 100 MiB passes it too."""
    huge = 100 * 1024 * 1024
    status, payload = _raw(
        hostile.live,
        route.method,
        concrete(route.path),
        {"Content-Length": str(huge), "Content-Type": "application/json"},
        b"",
    )
    check_answer(route, "a declared 100 MiB body", status, payload)
    assert status == 413, (route.path, status)
    if is_upload(route):
        return
    chunk = b"[" + b" " * (256 * 1024 - 2) + b"]"
    parts = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(MAX_BODY_MIB * 4 + 4))
    status, payload = _raw(
        hostile.live,
        route.method,
        concrete(route.path),
        {"Transfer-Encoding": "chunked", "Content-Type": "application/json"},
        parts + b"0\r\n\r\n",
    )
    check_answer(route, "a chunked body past --max-body-size", status, payload)
    assert status == 413, (route.path, status)


@pytest.mark.parametrize("route", BODY_ROUTES, ids=lambda r: f"{r.method} {r.path}")
def test_a_client_that_hangs_up_mid_body(hostile: Hostile, route: AppRoute) -> None:
    port = int(hostile.live.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(
            f"{route.method} {concrete(route.path)} HTTP/1.1\r\nHost: x\r\n"
            "Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
            '{"messages": [{"role": "user", "content": "'.encode()
        )
    # the server is none the worse: the same route answers a hostile but whole request
    status, payload = _raw(
        hostile.live,
        route.method,
        concrete(route.path),
        {"Content-Type": "application/json", "Content-Length": "2"},
        b"[]",
    )
    check_answer(route, "the request after a hang-up", status, payload)


# ------------------------------------------------------------- uploads: what the file holds


UPLOAD_FILES: dict[str, Callable[[Path], bytes]] = {
    "an ffconcat playlist naming a private file": lambda d: (
        b"ffconcat version 1.0\nfile " + str(d / "private.wav").encode() + b"\n"
    ),
    "an ffconcat playlist naming a FIFO": lambda d: (
        b"ffconcat version 1.0\nfile " + str(d / "pipe").encode() + b"\n"
    ),
    "an HLS playlist": lambda d: (
        b"#EXTM3U\n#EXTINF:10,\n" + str(d / "private.wav").encode() + b"\n#EXT-X-ENDLIST\n"
    ),
    "a path traversal as the file": lambda d: b"../../../../../../etc/passwd",
    "a decompression bomb (1 h of FLAC in 490 KB)": lambda d: flac_silence(3600),
    "a truncated FLAC": lambda d: flac_silence(3600)[:2000],
    "an image": lambda d: b"\x89PNG\r\n\x1a\n" + bytes(64),
    "an empty file": lambda d: b"",
}


@pytest.fixture(scope="module")
def disk(tmp_path_factory) -> Path:
    """What a hostile upload would like the server to read."""
    from audiokit import SENTENCES, speech, wav_bytes

    d = tmp_path_factory.mktemp("server-disk")
    pcm, rate = speech(SENTENCES[3])
    (d / "private.wav").write_bytes(wav_bytes(pcm, rate))
    (d / "private.wav").chmod(0o600)
    os.mkfifo(d / "pipe")
    return d


UPLOAD_TABLE = [
    pytest.param(route, name, id=f"{route.path} | {name}")
    for route in BODY_ROUTES
    if is_upload(route)
    for name in UPLOAD_FILES
]


@pytest.mark.parametrize(("route", "name"), UPLOAD_TABLE)
def test_hostile_upload(hostile: Hostile, disk: Path, route: AppRoute, name: str) -> None:
    content = UPLOAD_FILES[name](disk)
    fields = {"model": "whisper-1", "input": "Hello.", "response_format": "json"}
    files = {"file": ("upload.wav", content), "speaker_ref": ("upload.wav", content)}
    t0 = time.monotonic()
    r = httpx.post(hostile.live.url + concrete(route.path), data=fields, files=files, timeout=120)
    assert time.monotonic() - t0 < 60, f"{route.path} with {name}: a reader blocked"
    if route.path.endswith("transcriptions"):
        assert r.status_code == 400, r.text
    check_answer(route, name, r.status_code, r.content)
    assert "train" not in r.text.lower()  # the private recording's words
    assert str(disk) not in r.text
    hostile.rss_peak = max(hostile.rss_peak, rss_mib())


# --------------------------------------------------------------------- what held throughout


def test_every_route_is_documented_or_an_alias() -> None:
    """The OpenAPI document lists every route, so schemathesis (bench/robustness.py) reaches
    them all; a route left out of it must be an alias of one that is."""
    spec = json.loads((ROOT / "docs" / "openapi.json").read_text())
    for route in HTTP_ROUTES:
        if route.path in PAGE_ROUTES:
            continue
        if route.in_schema:
            assert route.method.lower() in spec["paths"].get(route.path, {}), route.path
        else:
            assert any(
                r.endpoint is route.endpoint and r.in_schema and r.method == route.method
                for r in HTTP_ROUTES
            ), f"{route.method} {route.path} is neither in the OpenAPI document nor an alias"


# ------------------------------------------------- routes that read a file the request names

# Every field of the OpenAPI document that names a file, a path or a URL, and how this table
# covers it: a new such field fails test_every_file_naming_field_is_covered until it is added.
FILE_FIELDS = {
    ("SlotActionRequest", "filename"): "slot restore and save, below",
    ("ImageSourceParam", "url"): "Anthropic image sources: base64 only, refused below",
    ("InputImage", "image_url"): "media URLs (file:// under --media-path), below",
    ("InputImage", "file_id"): "refused: there is no file store",
    ("InputFile", "file_data"): "refused below: input_file is not read",
    ("InputFile", "file_id"): "refused below",
    ("InputFile", "file_url"): "refused below",
    ("InputFile", "filename"): "refused below",
    ("InfillChunk", "filename"): "text of the prompt, never opened",
    ("LoraAdapterInfo", "path"): "a response field; adapters are chosen at start",
    ("SlotRestoreResponse", "filename"): "a response field",
    ("SlotSaveResponse", "filename"): "a response field",
    ("Body_create_transcription_v1_audio_transcriptions_post", "file"): "uploads, above",
}

HOSTILE_NAMES = {
    "a FIFO": "fifo.bin",
    "a header claiming 4 GiB": "huge-header.bin",
    "a truncated state file": "magic-only.bin",
    "a file that is no state": "not-a-state.bin",
    "a directory": "dir.bin",
    "a symlink to /etc/passwd": "link.bin",
    "a traversal": "../../../../../../etc/passwd",
    "an absolute path": "/etc/passwd",
    "a name of 300 bytes": "n" * 300,
    "a NUL byte": "a\x00b.bin",
    "an empty name": "",
    "a missing file": "missing.bin",
}


@pytest.mark.parametrize("action", ["restore", "save"])
@pytest.mark.parametrize("name", list(HOSTILE_NAMES))
def test_slot_files_named_by_a_hostile_request(
    hostile: Hostile, slot_dir: Path, action: str, name: str
) -> None:
    filename = HOSTILE_NAMES[name]
    if action == "save" and os.path.lexists(slot_dir / f"save-{filename}"):
        filename = f"save-{filename}"  # a save replaces what it names: its own copy
    t0 = time.monotonic()
    r = httpx.post(
        hostile.live.url + f"/slots/0?action={action}", json={"filename": filename}, timeout=60
    )
    assert time.monotonic() - t0 < 30, f"{action} of {name}: a reader blocked"
    assert r.status_code < 500, r.text
    if action == "restore" or filename.endswith("dir.bin") or "/" in filename:
        assert r.status_code == 400, r.text
    if action == "save" and r.status_code == 200:
        # a name in the folder is replaced by the saved file, never written through: the
        # symlink's target and the FIFO's readers are untouched
        saved = slot_dir / filename
        assert saved.is_file() and not saved.is_symlink()
    assert "root:" not in r.text and str(slot_dir) not in r.text
    assert not (Path("/etc") / "passwd.tmp").exists()
    assert (Path("/etc/passwd")).stat().st_size > 0


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "file://../../../../etc/passwd",
        "file://fifo.bin",
        "/etc/passwd",
        "data:image/png;base64,////",
    ],
)
def test_media_urls_naming_files(hostile: Hostile, url: str) -> None:
    """The embedded model has no projector: refused before any file is opened, in each API's
    shape."""
    chat = {
        "messages": [
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}
        ]
    }
    responses = {
        "input": [
            {
                "role": "user",
                "content": [
                    {"type": "input_image", "image_url": url},
                    {"type": "input_file", "file_url": url, "filename": "passwd"},
                ],
            }
        ]
    }
    for path, body in (("/v1/chat/completions", chat), ("/v1/responses", responses)):
        r = httpx.post(hostile.live.url + path, json=body, timeout=60)
        assert 400 <= r.status_code < 500 and "root:" not in r.text, r.text


def test_every_file_naming_field_is_covered() -> None:
    spec = json.loads((ROOT / "docs" / "openapi.json").read_text())
    found = set()

    def walk(node: object, schema: str) -> None:
        if isinstance(node, dict):
            for key in node.get("properties", {}):
                if any(w in key.lower() for w in ("file", "path", "url", "dir")):
                    found.add((schema, key))
            for value in node.values():
                walk(value, schema)
        elif isinstance(node, list):
            for value in node:
                walk(value, schema)

    for name, schema in spec["components"]["schemas"].items():
        walk(schema, name)
    missing = found - set(FILE_FIELDS)
    assert not missing, f"fields that name files, not in FILE_FIELDS: {sorted(missing)}"


# -------------------------------------------------------------------- websockets: every event

WS_ROUTES = [r for r in ROUTES if r.websocket]
WS_CASES: dict[str, str | bytes] = {
    "not JSON": "hello there",
    "a JSON array": "[]",
    "deep JSON": "[" * 200_000 + "]" * 200_000,
    "a lone surrogate": '{"type": "session.update", "session": {"instructions": "\\ud800"}}',
    "an unknown event type": json.dumps({"type": "x" * 100_000}),
    "fields of the wrong types": json.dumps({"type": "session.update", "session": 5}),
    "NaN": '{"type": "session.update", "session": {"temperature": NaN}}',
    "a binary frame": b"\x00\xff" * 1000,
    "a frame over 32 MiB": "x" * (33 * 1024 * 1024),
}
WS_TABLE = [
    pytest.param(route, name, id=f"WS {route.path} | {name}")
    for route in WS_ROUTES
    for name in WS_CASES
]


@pytest.mark.parametrize(("route", "name"), WS_TABLE)
def test_hostile_websocket_event(hostile: Hostile, route: AppRoute, name: str) -> None:
    """An error event (the session goes on) or a close with a protocol code, never 1011."""
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    url = hostile.live.url.replace("http", "ws", 1) + route.path
    with connect(url, max_size=None, open_timeout=30) as ws:
        assert json.loads(ws.recv(timeout=30))["type"] == "session.created"
        try:
            ws.send(WS_CASES[name])
            while True:
                event = json.loads(ws.recv(timeout=30))
                if event["type"] == "error":
                    break
        except ConnectionClosed as closed:
            code = closed.rcvd.code if closed.rcvd is not None else None
            assert code in (1003, 1007, 1008, 1009), f"{route.path} with {name}: closed {code}"
            return
        ws.send(json.dumps({"type": "input_audio_buffer.clear"}))  # the session goes on
        assert json.loads(ws.recv(timeout=30))["type"] == "input_audio_buffer.cleared"
    hostile.rss_peak = max(hostile.rss_peak, rss_mib())


def test_a_client_that_hangs_up_mid_handshake(hostile: Hostile) -> None:
    port = int(hostile.live.url.rsplit(":", 1)[1])
    for route in WS_ROUTES:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.sendall(f"GET {route.path} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n".encode())
    assert httpx.get(hostile.live.url + "/health", timeout=30).status_code == 200


def test_health_answered_throughout_and_memory_stayed_bounded(hostile: Hostile) -> None:
    """Runs last: every /health asked while the table ran answered 200, and the process did
    not grow by more than 1 GiB. The latencies are printed (the target is in bench/)."""
    probe = hostile.probe
    assert len(probe.latencies) > 20
    assert not probe.failures, probe.failures[:5]
    latencies = sorted(probe.latencies)
    p50 = statistics.median(latencies)
    p99 = latencies[int(0.99 * (len(latencies) - 1))]
    growth = max(hostile.rss_peak, rss_mib()) - hostile.rss_start
    print(
        f"\n/health during the hostile table: {len(latencies)} probes, p50 {p50 * 1000:.1f} ms,"
        f" p99 {p99 * 1000:.1f} ms, max {latencies[-1] * 1000:.1f} ms;"
        f" RSS {hostile.rss_start:.0f} MiB at start, peak growth {growth:.0f} MiB"
    )
    assert latencies[-1] < 10.0  # a stall, not a timing goal
    assert growth < 1024
