"""Router parts that need no running server: the preset file, the catalog, the children's
environment and how a request names its model."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import socket
import time
from pathlib import Path

import pytest
from llamactl.server import precheck
from llamactl.server.precheck import PRECHECK_BYTES
from llamactl.server.router import upstream
from llamactl.server.router.catalog import build_catalog
from llamactl.server.router.command import child_argv, child_env, new_secret
from llamactl.server.router.listener import ChildListener, adopt_listener
from llamactl.server.router.preset import read_preset
from llamactl.server.router.proxy import (
    downstream_headers,
    request_target,
    sse_error_event,
    unsafe_header,
    upstream_headers,
)
from llamactl.server.router.selection import (
    BodyModel,
    autoload_for,
    body_model,
    form_model_span,
    locate_model,
    model_member,
    query_params,
    rename_model,
    requested_model,
    with_query_model,
)
from llamactl.server.router.upstream import Pool
from serverkit import free_port, hermetic_settings

from llamactl import UpstreamConnectError, UpstreamError
from llamactl.core.errors import ConfigError
from llamactl.models import embedded_model_path

EMBEDDED = embedded_model_path()


def preset(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "models.toml"
    path.write_text(text, encoding="utf-8")
    return path


# ----------------------------------------------------------------------------- preset
def test_preset_values_are_checked_and_paths_made_absolute(tmp_path: Path) -> None:
    (tmp_path / "t.jinja").write_text("{{ messages }}")
    (tmp_path / "proj.gguf").write_bytes(b"")
    models = read_preset(
        preset(
            tmp_path,
            """
[a]
model = "SmolLM2"
aliases = "one"
ctx-size = 2048
parallel = 2
kv_unified = true
chat_template_file = "t.jinja"
mmproj = "proj.gguf"
draft_model = "elsewhere/draft.gguf"
""",
        )
    )
    (a,) = models
    assert a.name == "a" and a.model == "SmolLM2" and a.aliases == ("one",)
    assert a.settings == {
        "n_ctx": 2048,
        "parallel": 2,
        "kv_unified": True,
        "chat_template_file": tmp_path / "t.jinja",
    }
    assert a.extra == {"mmproj": str(tmp_path / "proj.gguf"), "draft_model": "elsewhere/draft.gguf"}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            'model = "x"\nctx_sise = 5',
            "line 3: [m] unknown key 'ctx_sise'; did you mean 'ctx_size'?",
        ),
        ('model = "x"\nparallel = "many"', "line 3: [m] invalid value for parallel: expected an"),
        ('model = "x"\nparallel = 0', "line 3: [m] parallel must be >= 1, got 0"),
        ('model = "x"\nport = 9000', "line 3: [m] 'port' is set by the router, not per model"),
        ('model = "x"\napi_key = "k"', "'api_key' is set by the router"),
        ("parallel = 2", 'line 1: [m] needs model = "PATH_OR_NAME"'),
        ('model = "x"\naliases = [1]', "line 3: [m] aliases must be a list of strings"),
    ],
)
def test_preset_mistakes_name_the_line_and_key(tmp_path: Path, body: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        read_preset(preset(tmp_path, f"[m]\n{body}\n"))
    assert message in str(err.value)


def test_preset_that_is_not_toml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is not valid TOML"):
        read_preset(preset(tmp_path, "[m\n"))
    with pytest.raises(ConfigError, match="must be a \\[table\\]"):
        read_preset(preset(tmp_path, 'model = "x"\n'))


# ----------------------------------------------------------------------------- catalog
def test_catalog_merges_preset_and_models_dir(tmp_path: Path) -> None:
    models = tmp_path / "models"
    (models / "sub").mkdir(parents=True)
    os.symlink(EMBEDDED, models / "a.gguf")
    os.symlink(EMBEDDED, models / "sub" / "b.gguf")
    (models / "bad.gguf").write_bytes(b"not a gguf file at all")
    path = preset(tmp_path, f'[a]\nmodel = "{EMBEDDED}"\naliases = ["first"]\nparallel = 1\n')
    settings = hermetic_settings({"models_preset": str(path)})
    catalog = build_catalog(settings, models)
    assert [s.name for s in catalog] == ["a", "bad", "sub/b"]  # the preset's "a" wins
    assert catalog.resolve("first").name == "a" and catalog.resolve("a").source == "preset"
    assert catalog.resolve("bad").error and catalog.resolve("sub/b").capabilities == ("chat",)
    assert catalog.resolve("nope") is None


def write_projector(path: Path, *, vision: bool = True, audio: bool = False) -> Path:
    """A header-only mmproj GGUF: enough for the catalog, which reads headers only."""
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(path, "clip")
    writer.add_bool("clip.has_vision_encoder", vision)
    writer.add_bool("clip.has_audio_encoder", audio)
    writer.add_tensor("mm.0.weight", np.zeros((2, 2), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_models_dir_pairs_projectors_as_llama_server_does(tmp_path: Path) -> None:
    models = tmp_path / "models"
    for sub in ("gemma", "pair", "crowd"):
        (models / sub).mkdir(parents=True)
    # a model alone in its subdirectory with an mmproj of any name: paired, dir name an alias
    os.symlink(EMBEDDED, models / "gemma" / "gemma-3-4b-Q8_0.gguf")
    write_projector(models / "gemma" / "mmproj-F16.gguf", audio=True)
    # mmproj-<model file name> beside its model, among others (llamactl convert's naming)
    os.symlink(EMBEDDED, models / "pair" / "a.gguf")
    os.symlink(EMBEDDED, models / "pair" / "b.gguf")
    write_projector(models / "pair" / "mmproj-b.gguf")
    # two models and one projector of no model's name: nothing is guessed
    os.symlink(EMBEDDED, models / "crowd" / "x.gguf")
    os.symlink(EMBEDDED, models / "crowd" / "y.gguf")
    write_projector(models / "crowd" / "mmproj-z.gguf")
    # at the top level too; an unreadable file named mmproj is still not a model
    os.symlink(EMBEDDED, models / "solo.gguf")
    (models / "mmproj-solo.gguf").write_bytes(b"broken")
    catalog = build_catalog(hermetic_settings({}), models)
    names = [s.name for s in catalog]
    assert names == ["solo", "crowd/x", "crowd/y", "gemma/gemma-3-4b-Q8_0", "pair/a", "pair/b"]
    gemma = catalog.resolve("gemma")
    assert gemma.name == "gemma/gemma-3-4b-Q8_0" and gemma.aliases == ("gemma",)
    assert gemma.extra == {"mmproj": str(models / "gemma" / "mmproj-F16.gguf")}
    assert gemma.projector_capabilities == ("see", "hear")
    assert catalog.resolve("pair/b").extra == {"mmproj": str(models / "pair" / "mmproj-b.gguf")}
    assert catalog.resolve("pair/a").extra == {} and catalog.resolve("pair") is None
    assert catalog.resolve("crowd/x").extra == catalog.resolve("crowd/y").extra == {}
    solo = catalog.resolve("solo")
    assert solo.extra == {"mmproj": str(models / "mmproj-solo.gguf")}
    assert solo.projector_capabilities == ()  # unreadable: the child says why when it loads
    # the projector reaches the child as the preset's `mmproj` does: a flag, not a variable
    env = child_env(hermetic_settings({}), gemma, "s", base={})
    assert not any("MMPROJ" in k for k in env)
    argv = child_argv(gemma, 4242, listen_fd=7)
    assert argv[argv.index("--mmproj") + 1] == str(models / "gemma" / "mmproj-F16.gguf")
    # a chat model reads what its projector encodes (the child serves it with --mmproj)
    assert gemma.input_modalities == ["text", "image", "audio"]
    assert gemma.output_modalities == ["text"]
    assert gemma.serves == ["text", "audio_in", "audio_out", "image_in"]
    plain = catalog.resolve("crowd/x")
    assert plain.input_modalities == ["text"] and plain.serves == ["text", "audio_in", "audio_out"]


def test_capabilities_of_decision_models() -> None:
    from llamactl.server.capabilities import architecture, served_capabilities

    assert architecture(("decide",), ("see",)) == {
        "input_modalities": ["text", "image"],
        "output_modalities": ["decisions"],
    }
    assert served_capabilities(("decide",)) == ["decisions"]
    assert served_capabilities(("decide",), ("see", "hear")) == [
        "decisions",
        "image_in",
        "audio_in",
    ]
    assert (
        served_capabilities(("see",)) == [] and architecture(("embed",))["input_modalities"] == []
    )


def test_catalog_refuses_a_name_used_twice(tmp_path: Path) -> None:
    path = preset(
        tmp_path, f'[a]\nmodel = "{EMBEDDED}"\n\n[b]\nmodel = "{EMBEDDED}"\naliases = ["a"]\n'
    )
    with pytest.raises(ConfigError, match="'a' is used by both 'a' and 'b'"):
        build_catalog(hermetic_settings({"models_preset": str(path)}), None)


def test_missing_preset_model_is_listed_with_its_error(tmp_path: Path) -> None:
    path = preset(tmp_path, '[gone]\nmodel = "nowhere.gguf"\n')
    (spec,) = build_catalog(hermetic_settings({"models_preset": str(path)}), None)
    assert spec.path is None and "model 'nowhere.gguf' was not found" in spec.error


# ----------------------------------------------------------------------------- children
def test_child_runs_with_its_own_secret_from_the_routers_settings(tmp_path: Path) -> None:
    path = preset(tmp_path, f'[a]\nmodel = "{EMBEDDED}"\nparallel = 1\nmmproj = "p.gguf"\n')
    settings = hermetic_settings(
        {"models_preset": str(path), "api_key": ["k"], "threads": 3, "temperature": 0.5}
    )
    (spec,) = build_catalog(settings, None)
    inherited = {"PATH": "/bin", "LLAMACTL_API_KEY": "leak", "LLAMACTL_API_KEY_FILE": "/k"}
    secret = new_secret()
    assert len(secret) >= 43 and secret != new_secret() and "," not in secret
    env = child_env(settings, spec, secret, inherited)
    assert env["PATH"] == "/bin" and env["LLAMACTL_CONFIG"] == os.devnull
    # neither the router's key nor the inherited ones: the child's own secret only
    assert [k for k in env if "API_KEY" in k] == ["LLAMACTL_API_KEY"]
    assert env["LLAMACTL_API_KEY"] == secret
    assert env["LLAMACTL_PARALLEL"] == "1" and env["LLAMACTL_THREADS"] == "3"
    assert env["LLAMACTL_TEMPERATURE"] == "0.5" and env["LLAMACTL_KV_UNIFIED"] == "false"
    assert not any("MMPROJ" in k for k in env)
    assert "LLAMACTL_MODELS_PRESET" not in env and "LLAMACTL_PORT" not in env
    argv = child_argv(spec, 4242, ("py", "-m", "llamactl"), listen_fd=7)
    assert argv[:4] == ["py", "-m", "llamactl", "serve"]
    assert argv[argv.index("--host") + 1] == "127.0.0.1" and "--api-key" not in argv
    assert not any(secret in a for a in argv)
    assert argv[argv.index("--alias") + 1] == "a" and argv[argv.index("--port") + 1] == "4242"
    # it serves on the socket the router bound, inherited as descriptor 7: it binds nothing
    assert argv[argv.index("--listen-fd") + 1] == "7"
    assert argv[argv.index("--mmproj") + 1] == "p.gguf"


# ----------------------------------------------------------------------------- selection
FORM = (
    b"--XyZ\r\n"
    b'Content-Disposition: form-data; name="file"; filename="a.wav"\r\n'
    b"Content-Type: audio/wav\r\n\r\nRIFF....\r\n"
    b"--XyZ\r\n"
    b'Content-Disposition: form-data; name="model"\r\n\r\ntiny\r\n'
    b"--XyZ--\r\n"
)


def test_the_model_is_read_from_json_form_or_query() -> None:
    assert requested_model({}, "application/json", b'{"model": "a", "x": 1}') == "a"
    assert requested_model({"model": "q"}, "application/json", b'{"x": 1}') == "q"
    assert requested_model({}, "application/json", b"not json") is None
    assert requested_model({}, "application/json", b'{"model": 5}') is None
    assert requested_model({}, "multipart/form-data; boundary=XyZ", FORM) == "tiny"
    assert requested_model({"model": "g"}, "", b"") == "g"


def test_aliases_are_renamed_for_the_child() -> None:
    def renamed(ctype: str, body: bytes) -> bytes:
        found = body_model(ctype, body)
        assert found is not None
        return rename_model(body, found, "small")

    # only the value changes: the rest of the body stays as the client wrote it
    assert renamed("application/json", b'{"n":1,\n "model" : "tiny" }') == (
        b'{"n":1,\n "model" : "small" }'
    )
    assert renamed("application/json", '{"x": "é", "model": "tiny"}'.encode()) == (
        '{"x": "é", "model": "small"}'.encode()
    )
    form = renamed("multipart/form-data; boundary=XyZ", FORM)
    assert b'name="model"\r\n\r\nsmall\r\n' in form and b"RIFF....\r\n" in form
    assert with_query_model(b"model=tiny&intent=transcription", "small") == (
        b"model=small&intent=transcription"
    )
    assert with_query_model(b"intent=x", "small") == b"intent=x"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b'{"model": "a"}', ("a", 10, 13)),
        (b' { "x" : [1, {"model": "inner"}], "model":"b" } ', ("b", 42, 45)),
        (b'{"model": "a", "model": "last"}', ("last", 24, 30)),  # as json.loads
        ('{"é": 1, "model": "ü"}'.encode(), ("ü", 19, 23)),  # byte offsets
        (b'{"model": "a\\u00e9"}', ("a\u00e9", 10, 19)),
        (b'{"model": ""}', None),
        (b'{"model": 5}', None),
        (b'["model", "a"]', None),
        (b'{"model": "a"} trailing', None),
        (b'{"model": "a",}', None),
        (b'{"model": "a"', None),
        (b"\xff\xfe{}", None),
        (b'{"a": ' + b"[" * 200_000 + b"]" * 200_000 + b', "model": "a"}', None),
        (b"", None),
    ],
)
def test_the_json_scan_finds_the_top_level_model(body: bytes, expected) -> None:
    assert model_member(body) == expected
    if expected:  # the span is the value's JSON literal
        assert json.loads(body[expected[1] : expected[2]]) == expected[0]


def test_large_json_bodies_are_scanned_off_the_event_loop() -> None:
    messages = [{"role": "user", "content": f"message {i}"} for i in range(60_000)]
    body = json.dumps({"messages": messages, "model": "tiny"}).encode()
    assert len(body) > PRECHECK_BYTES

    async def main() -> tuple[BodyModel | None, int, BodyModel | None]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.001)
                ticks += 1

        task = asyncio.create_task(ticker())
        found = await locate_model("application/json", body)
        task.cancel()
        bad = await locate_model("application/json", b"[" * (PRECHECK_BYTES + 1))
        return found, ticks, bad

    try:
        found, ticks, bad = asyncio.run(main())
    finally:
        precheck.shutdown()
    assert found is not None and found.name == "tiny" and found.json
    assert body[found.start : found.end] == b'"tiny"'
    assert ticks > 1  # the loop kept turning while the body was scanned
    assert bad is None


def test_autoload_query_overrides_the_default() -> None:
    assert autoload_for(query_params(b"autoload=false"), True) is False
    assert autoload_for(query_params(b"autoload=1"), False) is True
    assert autoload_for(query_params(b"autoload=maybe"), True) is True
    assert autoload_for({}, False) is False


# ----------------------------------------------------------------------------- upstream client
def test_upstream_reads_chunked_and_sized_bodies_and_skips_stale_connections() -> None:
    async def main() -> None:
        seen: list[bytes] = []

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            head = await reader.readuntil(b"\r\n\r\n")
            seen.append(head)
            if b"/big" in head:  # one chunk of 1 MiB, sent in pieces
                payload = bytes(range(256)) * 4096
                data = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                data += b"3\r\nabc\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(payload), payload)
                for i in range(0, len(data), 100_000):
                    writer.write(data[i : i + 100_000])
                    await writer.drain()
            elif b"/chunked" in head:
                # framing split anywhere across reads, a chunk extension and a trailer
                for piece in (
                    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel",
                    b"lo\r\n6;ext=1\r\n world\r",
                    b"\n1\r\n!\r\n0\r\nx-trailer: 1\r\n",
                    b"\r\n",
                ):
                    writer.write(piece)
                    await writer.drain()
                    await asyncio.sleep(0.02)
            else:
                body = await reader.readexactly(2)
                writer.write(b"HTTP/1.1 201 Created\r\nContent-Length: 4\r\n\r\n" + body + b"ok")
            await writer.drain()
            writer.close()  # one request per connection: a pooled one is always stale

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        pool = Pool("127.0.0.1", server.sockets[0].getsockname()[1])
        resp = await pool.request("GET", "/chunked", [(b"x-a", b"1")], b"")
        assert resp.status == 200 and resp.header(b"transfer-encoding") == b"chunked"
        # whole chunks are passed on as soon as they are in; those read together, together
        assert b"".join([chunk async for chunk in resp.body()]) == b"hello world!"
        resp.close()
        await asyncio.sleep(0.05)  # the server's close is in: that connection is not reused
        resp = await pool.request("GET", "/big", [], b"")
        got = b"".join([chunk async for chunk in resp.body()])
        assert got == b"abc" + bytes(range(256)) * 4096
        resp.close()
        await asyncio.sleep(0.05)
        resp = await pool.request("POST", "/sized", [], b"{}")
        assert resp.status == 201 and b"".join([c async for c in resp.body()]) == b"{}ok"
        assert resp.length == 4
        resp.close()
        assert b"x-a: 1\r\n" in seen[0] and b"content-length: 2\r\n" in seen[-1]
        assert len(seen) == 3  # each request sent once
        server.close()
        with pytest.raises(UpstreamConnectError):
            await Pool("127.0.0.1", free_port()).request("GET", "/", [], b"")

    asyncio.run(main())


def test_a_childs_listener_holds_its_port_until_it_has_drained_the_dead_childs_queue() -> None:
    """The router binds and listens before the child exists, so no squatter can bind the
    port; once the child died, the requests it never accepted are known to have reached no
    one (safe to send again), and after the port is let go nothing connects to it again."""

    async def main() -> None:
        listener = ChildListener()
        port = listener.port
        for address, reuse in (("127.0.0.1", False), ("127.0.0.1", True), ("0.0.0.0", True)):
            with socket.socket() as squatter:
                if reuse:
                    squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                with pytest.raises(OSError) as err:
                    squatter.bind((address, port))
                assert err.value.errno == errno.EADDRINUSE, address
        # a live child: the inherited descriptor (a copy of the router's, as pass_fds makes)
        seen: list[bytes] = []

        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            seen.append(await reader.readuntil(b"\r\n\r\n"))
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            await writer.drain()
            await reader.read()  # the router closes first (no TIME_WAIT on the child's port)
            writer.close()

        child = await asyncio.start_server(answer, sock=socket.socket(fileno=os.dup(listener.fd)))
        pool = Pool("127.0.0.1", port, child=listener)
        resp = await pool.request("GET", "/a", [], b"")
        assert resp.status == 200 and b"".join([c async for c in resp.body()]) == b"ok"
        resp.close()
        pool.close()
        await asyncio.sleep(0.1)
        child.close()  # the child is gone; the router still holds the port
        await child.wait_closed()
        pending = asyncio.create_task(pool.request("POST", "/b", [], b"{}"))
        await asyncio.sleep(0.2)  # connected and written: queued, unread
        assert not pending.done()
        listener.retire()  # the router saw the exit
        with pytest.raises(UpstreamConnectError, match="before it took the request"):
            await pending
        assert len(seen) == 1
        # the port is free now: a process that binds it gets no connection from the router
        with socket.socket() as squatter:
            squatter.bind(("127.0.0.1", port))
            squatter.listen(8)
            squatter.setblocking(False)
            with pytest.raises(UpstreamConnectError, match="the child has exited"):
                await pool.request("GET", "/c", [], b"")
            with pytest.raises(UpstreamConnectError):
                await listener.connect()
            with pytest.raises(BlockingIOError):
                squatter.accept()

    asyncio.run(main())


def test_a_child_adopts_only_a_listening_tcp_socket(tmp_path: Path) -> None:
    with open(tmp_path / "f", "wb") as f:
        with pytest.raises(ValueError, match="is not a socket"):
            adopt_listener(f.fileno())
        assert os.fstat(f.fileno())  # left open for its owner
    with (
        socket.socket() as unbound,
        pytest.raises(ValueError, match="is not a listening TCP socket"),
    ):
        adopt_listener(unbound.fileno())
    listener = ChildListener()
    sock = adopt_listener(os.dup(listener.fd))
    assert sock.getsockname()[1] == listener.port and not sock.get_inheritable()
    sock.close()
    listener.retire()


def test_serve_listen_fd_is_a_routers_childs_option_only(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from llamactl.cli.main import app

    env = {"LLAMACTL_CONFIG": os.devnull}
    cases = [
        (["--listen-fd", "0"], "a router's child needs its API key"),
        (["--listen-fd", "0", "--models-dir", str(tmp_path)], "a router's child serves one model"),
    ]
    with open(tmp_path / "f", "wb") as f:
        cases.append((["--listen-fd", str(f.fileno()), "--api-key", "k"], "is not a socket"))
        for args, message in cases:
            result = CliRunner().invoke(app, ["serve", *args], env=env)
            assert result.exit_code == 2, result.output
            assert message in " ".join(result.output.split()), args


def test_upstream_never_sends_a_request_twice() -> None:
    """A connection that breaks after the request was written is an UpstreamError (maybe
    seen), not UpstreamConnectError (never sent), and is not retried, pooled or fresh."""

    async def main() -> None:
        heads: list[bytes] = []
        connections = 0

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal connections
            connections += 1
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    break
                heads.append(head)
                if b"/die" in head:  # it got the request, then went away without answering
                    break
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                await writer.drain()
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        pool = Pool("127.0.0.1", server.sockets[0].getsockname()[1])
        for path in ("/ok", "/die"):  # the second goes out on the pooled connection
            try:
                resp = await pool.request("GET", path, [], b"")
            except UpstreamError as e:
                assert not isinstance(e, UpstreamConnectError) and path == "/die"
                continue
            assert b"".join([c async for c in resp.body()]) == b"ok"
            resp.close()
        with pytest.raises(UpstreamError) as err:  # a fresh connection: the same
            await pool.request("GET", "/die", [], b"")
        assert not isinstance(err.value, UpstreamConnectError)
        assert [h.split(b" ")[1] for h in heads] == [b"/ok", b"/die", b"/die"]
        assert connections == 2
        server.close()

    asyncio.run(main())


def test_idle_connections_are_reused_only_briefly(monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> list[int]:
        peers: list[int] = []

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while True:
                try:
                    await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    break
                peers.append(writer.get_extra_info("peername")[1])
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                await writer.drain()
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        pool = Pool("127.0.0.1", server.sockets[0].getsockname()[1])
        for idle in (2.0, 2.0, 0.0, 0.0):
            monkeypatch.setattr(upstream, "MAX_IDLE_SECONDS", idle)
            resp = await pool.request("GET", "/", [], b"")
            [c async for c in resp.body()]
            resp.close()
        server.close()
        return peers

    peers = asyncio.run(main())
    # reused while young; with no idle time allowed every request has a new connection
    assert peers[0] == peers[1] and len({peers[1], peers[2], peers[3]}) == 3


# ----------------------------------------------------------------------------- proxy headers
def test_headers_to_the_child_carry_its_secret_and_the_routers_request_id() -> None:
    scope = {
        "headers": [
            (b"host", b"router:8080"),
            (b"authorization", b"Bearer client-key"),
            (b"x-api-key", b"client-key"),
            (b"origin", b"http://localhost:3000"),
            (b"x-request-id", b"forged\tline"),
            (b"x-forwarded-for", b"10.9.9.9"),
            (b"connection", b"keep-alive, X-Hop"),
            (b"x-hop", b"1"),
            (b"transfer-encoding", b"chunked"),
            (b"content-length", b"5"),
            (b"x-custom", b"kept"),
        ],
        "state": {"request_id": "abc123"},
        "client": ("127.0.0.1", 5555),
    }
    assert upstream_headers(scope, "s3cret") == [
        (b"x-custom", b"kept"),
        (b"x-request-id", b"abc123"),
        (b"x-forwarded-for", b"127.0.0.1"),
        (b"authorization", b"Bearer s3cret"),
    ]
    child = [(b"content-type", b"text/plain"), (b"connection", b"x-hop"), (b"x-hop", b"1")]
    assert downstream_headers(child) == [(b"content-type", b"text/plain")]
    assert unsafe_header([(b"x-ok", b"fine"), (b"x-bad", b"a\r\nb: c")]) == "x-bad"
    assert unsafe_header([(b"x-nul", b"a\0b")]) == "x-nul"
    assert unsafe_header([(b"x-ok", b"fine \t tab")]) is None
    assert request_target({"path": "/v1/a b", "raw_path": b"/v1/a b"}) is None
    assert request_target({"path": "/v1/x", "raw_path": b"/v1/x", "query_string": b"a=1"}) == (
        "/v1/x?a=1"
    )


def test_multipart_model_is_found_in_linear_time() -> None:
    ctype = "multipart/form-data; boundary=XyZ"
    assert form_model_span('multipart/form-data; boundary="XyZ"', FORM) is not None
    assert requested_model({}, "multipart/form-data", FORM) is None  # no boundary
    # bodies that made the old pattern backtrack for minutes (quadratic in their size)
    crafted = [
        b"content-disposition:" * 200_000,
        b'Content-Disposition: form-data; name="model"' * 100_000,
        b"--XyZ\r\n" * 500_000,
        b'--XyZ\r\nContent-Disposition: form-data; name="x"\r\n\r\n' * 100_000,
    ]
    t0 = time.monotonic()
    for body in crafted:
        assert requested_model({"model": "q"}, ctype, body) == "q"
    assert time.monotonic() - t0 < 10  # the old pattern: minutes for the first alone


def test_a_stream_cut_off_ends_with_its_apis_error_event() -> None:
    chat = sse_error_event("/v1/chat/completions", "gone")
    assert chat.startswith(b"data: ") and chat.endswith(b"\n\n")
    assert json.loads(chat[6:])["error"] == {"code": 502, "message": "gone", "type": "server_error"}
    name, data = sse_error_event("/v1/messages", "gone").decode().split("\n")[:2]
    assert name == "event: error"
    assert json.loads(data[6:]) == {
        "type": "error",
        "error": {"type": "api_error", "message": "gone"},
    }
    name, data = sse_error_event("/v1/responses", "gone").decode().split("\n")[:2]
    assert name == "event: error"
    assert json.loads(data[6:]) == {
        "type": "error",
        "code": "server_error",
        "message": "gone",
        "param": None,
    }
