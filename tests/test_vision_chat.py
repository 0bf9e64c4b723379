"""Images in chat through mtmd, on tiny converted pairs: the SigLIP mmproj the project's
converter writes for the synthetic lfm2-d1 checkpoint (projection dim 64), served beside a
plain chat GGUF of n_embd 64 (a decision trunk without its head and decision keys): lfm2-d1's
own `lfm2` trunk (hybrid: short convolutions + attention, so its KV cannot be trimmed and reuse
goes through checkpoints) and openjev-qwen3's `qwen3` trunk (attention only: f16 KV with
companion rows). The server tests use the LFM2 pair, the real LFM2-VL layout.

The models are random, so greedy text is one repeated token whatever they see; what an image
changes is the distribution the answer is drawn from, so tests compare greedy top logprobs (and
seeded samples, for concurrency).
"""

from __future__ import annotations

import base64
import struct
import threading
import zlib
from pathlib import Path

import httpx
import pytest
from imagekit import png
from llamactl.converters import convert
from serverkit import hermetic_settings, serve_app
from synthetic_checkpoints import cached, write_chat_copy
from typer.testing import CliRunner

from llamactl.cli.main import app
from llamactl.core.errors import InvalidRequestError, ModelLoadError
from llamactl.core.gguf_info import read_gguf_info
from llamactl.engine.chat.model import ChatModel, ChatRequest
from llamactl.engine.engine import Engine, EngineConfig
from llamactl.engine.media_prompt import MediaInput
from llamactl.engine.model import Model
from llamactl.engine.types import SamplingParams, TextDelta

MODEL_FIXTURES = {"pair", "vlm", "vision_server", "text_server"}

GREEDY = SamplingParams(temperature=0.0)
SEEDED = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=11)


def data_url(image: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(image).decode()


IMG1, IMG2 = png(64, 48, 1), png(64, 48, 2)


def chat_trunk(factory, family: str) -> Path:
    out = factory.mktemp(family.replace("-", "_") + "_chat")
    gguf = convert(cached(factory, family), out / "decision.gguf").outfile
    return write_chat_copy(gguf, out / "chat.gguf")


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> tuple[Path, Path]:
    """(the LFM2 chat GGUF, the mmproj GGUF), built once per module."""
    out = tmp_path_factory.mktemp("vlm")
    proj = convert(cached(tmp_path_factory, "lfm2-d1"), out / "d1.gguf", mmproj=True).outfile
    chat = chat_trunk(tmp_path_factory, "lfm2-d1")
    info = read_gguf_info(chat)
    assert info.architecture == "lfm2" and "chat" in info.capabilities
    return chat, proj


@pytest.fixture(scope="module", params=["lfm2-d1", "openjev-qwen3"])
def vlm(request, pair, tmp_path_factory):
    """The chat model the engine tests pair with the mmproj: each trunk in turn."""
    path = pair[0] if request.param == "lfm2-d1" else chat_trunk(tmp_path_factory, request.param)
    model = Model(path)
    assert model.info.n_embd == 64 and model.info.is_hybrid == (request.param == "lfm2-d1")
    yield model
    model.close()


def engine(model: Model, mmproj: Path | None, **kw) -> Engine:
    eng = Engine(model, EngineConfig(n_parallel=kw.pop("n_parallel", 1), n_ctx=4096, **kw))
    if mmproj is not None:
        eng.attach_projector(mmproj)
    return eng


def ask(chat: ChatModel, images: list[bytes], text: str = "What is this?", **kw):
    content = text + "".join(f"\n{chat.media_marker}" for _ in images)
    kw.setdefault("sampling", GREEDY)
    kw.setdefault("max_tokens", 3)
    return ChatRequest(
        [{"role": "user", "content": content}],
        media=tuple(MediaInput(i) for i in images),
        logprobs=3,
        **kw,
    )


def run(chat: ChatModel, req: ChatRequest):
    """(generated tokens, first token's top logprobs, prompt tokens, cached tokens)."""
    stream = chat.start(req)
    tokens, first = [], None
    done = None
    for event in stream.raw:
        if isinstance(event, TextDelta):
            for chosen, top in event.logprobs:
                tokens.append(chosen.token)
                if first is None:
                    first = [(t.token, round(t.logprob, 4)) for t in top]
        else:
            done = event
    assert done is not None
    return tokens, first, done.usage.prompt_tokens, done.usage.cached_tokens


# --------------------------------------------------------------------------- engine


def test_the_image_changes_the_answer_and_each_image_its_own(vlm, pair):
    with engine(vlm, pair[1], cache_ram_mib=0) as eng:
        chat = ChatModel(eng)
        text = run(chat, ask(chat, [], cache_prompt=False))
        one = run(chat, ask(chat, [IMG1], cache_prompt=False))
        two = run(chat, ask(chat, [IMG2], cache_prompt=False))
        wide = run(chat, ask(chat, [png(256, 64, 3)], cache_prompt=False))
        both = run(chat, ask(chat, [IMG1, IMG2], cache_prompt=False))
    assert one[1] != text[1] and two[1] != one[1]  # what the model would answer
    assert one[2] > text[2] + 16  # the image fills KV positions of its own
    assert one[2] == two[2]  # same size, same number of positions
    assert wide[2] != one[2]  # another size, another tiling
    assert both[2] - text[2] == 2 * (one[2] - text[2])


def test_a_rendered_prompt_holds_one_span_per_image(vlm, pair):
    with engine(vlm, pair[1]) as eng:
        chat = ChatModel(eng)
        rendered = chat.render(ask(chat, [IMG1, IMG2]))
        media = rendered.media
        assert media is not None and media.n_media == 2
        a, b = media.spans
        assert a.end <= b.start and b.end < len(rendered.tokens)
        assert all(t < 0 for t in rendered.tokens[a.start : a.end])
        assert all(t >= 0 for t in media.text_tokens())
        # the same image twice stands for the same ids; another image for others
        again = chat.render(ask(chat, [IMG1, IMG1])).media
        assert again is not None
        first = rendered.tokens[a.start : a.end]
        assert again.tokens[a.start : a.end] == first
        assert again.tokens[again.spans[1].start : again.spans[1].end] == first
        assert rendered.tokens[b.start : b.end] != first
        assert media.floor(a.start + 5) == a.start and media.floor(a.end) == a.end


def test_the_same_image_reuses_the_cache_and_another_never_does(vlm, pair):
    with engine(vlm, pair[1], cache_ram_mib=0) as eng:
        chat = ChatModel(eng)
        cold1 = run(chat, ask(chat, [IMG1], cache_prompt=False))
        cold2 = run(chat, ask(chat, [IMG2], cache_prompt=False))
    with engine(vlm, pair[1], cache_ram_mib=256) as eng:
        chat = ChatModel(eng)
        span = chat.render(ask(chat, [IMG1])).media.spans[0]  # type: ignore[union-attr]
        first = run(chat, ask(chat, [IMG1]))
        again = run(chat, ask(chat, [IMG1]))
        other = run(chat, ask(chat, [IMG2]))  # same text, another image
        back = run(chat, ask(chat, [IMG1]))  # from the RAM prompt cache
    assert first[:2] == cold1[:2] and again[:2] == cold1[:2] and back[:2] == cold1[:2]
    assert other[:2] == cold2[:2]
    assert again[3] >= span.end  # the image itself came from the KV
    assert other[3] <= span.start  # never the other image's KV
    assert back[3] >= span.end


def test_concurrent_sessions_with_images_answer_as_alone(vlm, pair):
    images = [IMG1, IMG2, png(96, 64, 5), None]
    reqs = lambda chat: [  # noqa: E731
        ask(chat, [i] if i else [], text=f"Picture {k}", sampling=SEEDED, max_tokens=6)
        for k, i in enumerate(images)
    ]
    with engine(vlm, pair[1], n_parallel=4, cache_ram_mib=0) as eng:
        chat = ChatModel(eng)
        alone = [run(chat, r)[:3] for r in reqs(chat)]
        together: list = [None] * len(images)

        def one(k: int, r: ChatRequest) -> None:
            together[k] = run(chat, r)[:3]

        threads = [threading.Thread(target=one, args=(k, r)) for k, r in enumerate(reqs(chat))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    assert together == alone


def test_n_choices_share_one_decoded_image(vlm, pair):
    with engine(vlm, pair[1], n_parallel=2, cache_ram_mib=0) as eng:
        chat = ChatModel(eng)
        alone = run(chat, ask(chat, [IMG1], cache_prompt=False))
        firsts: dict[int, list] = {}
        tokens: dict[int, list[int]] = {0: [], 1: []}
        for event in chat.start(ask(chat, [IMG1], n=2, cache_prompt=False)).raw:
            if isinstance(event, TextDelta):
                for chosen, top in event.logprobs:
                    tokens[event.index].append(chosen.token)
                    firsts.setdefault(event.index, [(t.token, round(t.logprob, 4)) for t in top])
    assert firsts[0] == firsts[1] == alone[1]
    assert tokens[0] == tokens[1] == alone[0]


def test_media_errors(vlm, pair):
    with engine(vlm, None) as eng:
        chat = ChatModel(eng)
        with pytest.raises(InvalidRequestError, match="image input is not supported - hint"):
            chat.start(ask(chat, [IMG1]))
    with engine(vlm, pair[1]) as eng:
        chat = ChatModel(eng)
        with pytest.raises(InvalidRequestError, match="could not be decoded"):
            chat.start(ask(chat, [b"not an image at all"]))
        with pytest.raises(InvalidRequestError, match="audio input is not supported"):
            chat.start(
                ChatRequest(
                    [{"role": "user", "content": chat.media_marker}],
                    media=(MediaInput(IMG1, "audio"),),
                )
            )
        with pytest.raises(InvalidRequestError, match="media markers"):
            chat.start(ask(chat, [IMG1], text=f"two {chat.media_marker}"))
        assert eng.busy_slots == 0  # nothing was left behind
        ok = run(chat, ask(chat, [IMG1]))
        assert ok[2] > 0


def test_a_projector_that_is_not_one_is_refused_at_load(vlm, pair, tmp_path):
    with engine(vlm, None) as eng:
        with pytest.raises(ModelLoadError, match="mmproj file not found"):
            eng.attach_projector(tmp_path / "mmproj-none.gguf")
        with pytest.raises(ModelLoadError, match="not an mmproj file"):
            eng.attach_projector(pair[0])
        assert eng.projector is None


def test_media_path_must_be_a_directory(tmp_path):
    result = CliRunner().invoke(app, ["serve", "--media-path", str(tmp_path / "none")])
    assert result.exit_code == 2 and "not a directory" in result.output


# --------------------------------------------------------------------------- server


def _live(model: Path, mmproj: Path | None, **overrides):
    from llamactl.server.app import create_app

    overrides.setdefault("parallel", 2)
    overrides.setdefault("threads", 2)
    settings = hermetic_settings({"model": str(model), "cache_ram": 64, **overrides})
    return serve_app(create_app(settings, model_path=model, mmproj=mmproj), settings)


@pytest.fixture(scope="module")
def media_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("media")
    (root / "pics").mkdir()
    (root / "pics" / "one.png").write_bytes(IMG1)
    (root.parent / "outside.png").write_bytes(IMG2)
    return root


@pytest.fixture(scope="module")
def vision_server(pair, media_dir):
    with _live(pair[0], pair[1], media_path=str(media_dir)) as live:
        yield live


@pytest.fixture(scope="module")
def text_server(pair):
    with _live(pair[0], None) as live:
        yield live


def chat_body(*parts: dict, **kw) -> dict:
    content = [{"type": "text", "text": "What is this?"}, *parts]
    return {
        "messages": [{"role": "user", "content": content}],
        "max_tokens": 2,
        "temperature": 0,
        "logprobs": True,
        "top_logprobs": 3,
        **kw,
    }


def image_part(url: str) -> dict:
    return {"type": "image_url", "image_url": {"url": url}}


def post(live, path: str, body: dict) -> httpx.Response:
    return httpx.post(live.url + path, json=body, timeout=120)


def top(resp: httpx.Response) -> list:
    return resp.json()["choices"][0]["logprobs"]["content"][0]["top_logprobs"]


def test_openai_chat_with_an_image(vision_server):
    text = post(vision_server, "/v1/chat/completions", chat_body())
    url = post(vision_server, "/v1/chat/completions", chat_body(image_part(data_url(IMG1))))
    raw = post(
        vision_server,
        "/v1/chat/completions",
        chat_body(image_part(base64.b64encode(IMG1).decode())),
    )
    local = post(
        vision_server, "/v1/chat/completions", chat_body(image_part("file://pics/one.png"))
    )
    assert text.status_code == url.status_code == raw.status_code == local.status_code == 200
    n_text = text.json()["usage"]["prompt_tokens"]
    n_image = url.json()["usage"]["prompt_tokens"]
    assert n_image > n_text + 16
    assert top(url) != top(text)
    assert top(raw) == top(url) == top(local)  # the same bytes, however sent
    assert local.json()["usage"]["prompt_tokens_details"]["cached_tokens"] > n_text
    count = post(
        vision_server,
        "/v1/chat/completions/input_tokens",
        chat_body(image_part(data_url(IMG1))),
    )
    assert count.status_code == 200  # the image's positions count too
    assert count.json()["input_tokens"] == n_image
    models = httpx.get(vision_server.url + "/v1/models").json()["data"][0]
    assert "image" in models["architecture"]["input_modalities"]
    assert "image_in" in models["capabilities"]


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("https://example.com/cat.png", "never downloads"),
        ("http://127.0.0.1:1/cat.png", "never downloads"),
        ("file://../outside.png", "file path is not allowed"),
        ("file:///etc/passwd", "file path is not allowed"),
        ("file://pics/missing.png", "does not exist"),
        ("data:text/html;base64,aGVsbG8=", "Invalid uri format"),
        ("malformed", "Invalid base64"),
        (data_url(b"GIF89a\x10\x00\x10\x00 but not really"), "could not be decoded"),
        (data_url(b"RIFF\x00\x00\x00\x00WEBPVP8 "), "not in a format llamactl reads"),
        (data_url(b"\x89PNG\r\n\x1a\n"), "truncated before its size"),
    ],
)
def test_bad_images_are_400(vision_server, url, message):
    resp = post(vision_server, "/v1/chat/completions", chat_body(image_part(url)))
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert message in error["message"] and error["type"] == "invalid_request_error"


def test_audio_on_a_vision_only_projector_is_400(vision_server):
    part = {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}
    resp = post(vision_server, "/v1/chat/completions", chat_body(part))
    assert resp.status_code == 400
    assert resp.json()["error"]["message"].startswith("audio input is not supported - hint")


def test_without_a_projector_images_are_refused_as_llama_server_does(text_server):
    resp = post(text_server, "/v1/chat/completions", chat_body(image_part(data_url(IMG1))))
    assert resp.status_code == 400
    assert resp.json()["error"]["message"] == (
        "image input is not supported - hint: if this is unexpected, you may need to provide "
        "the mmproj"
    )
    anthropic = post(text_server, "/v1/messages", anthropic_body(IMG1))
    assert anthropic.status_code == 400
    assert anthropic.json()["type"] == "error"
    assert "image input is not supported" in anthropic.json()["error"]["message"]


def test_file_urls_need_media_path(text_server):
    resp = post(text_server, "/v1/chat/completions", chat_body(image_part("file://one.png")))
    assert resp.status_code == 400  # no projector here: refused before any file is read


def anthropic_body(image: bytes, **source) -> dict:
    src = source or {
        "type": "base64",
        "media_type": "image/png",
        "data": base64.b64encode(image).decode(),
    }
    return {
        "model": "any",
        "max_tokens": 2,
        "temperature": 0,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is this?"},
                    {"type": "image", "source": src},
                ],
            }
        ],
    }


def test_anthropic_image_blocks(vision_server):
    ok = post(vision_server, "/v1/messages", anthropic_body(IMG1))
    assert ok.status_code == 200, ok.text
    text_only = anthropic_body(IMG1)
    text_only["messages"][0]["content"] = text_only["messages"][0]["content"][:1]
    plain = post(vision_server, "/v1/messages", text_only)
    assert (
        ok.json()["usage"]["input_tokens"] + ok.json()["usage"].get("cache_read_input_tokens", 0)
        > plain.json()["usage"]["input_tokens"] + 16
    )
    url = post(
        vision_server, "/v1/messages", anthropic_body(IMG1, type="url", url="https://x/y.png")
    )
    assert url.status_code == 400 and url.json()["type"] == "error"
    assert "never downloads" in url.json()["error"]["message"]


def test_responses_input_image(vision_server):
    body = {
        "model": "any",
        "max_output_tokens": 2,
        "temperature": 0,
        "input": [
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "What is this?"},
                    {"type": "input_image", "image_url": data_url(IMG2)},
                ],
            }
        ],
    }
    resp = post(vision_server, "/v1/responses", body)
    assert resp.status_code == 200, resp.text
    body["input"][0]["content"] = body["input"][0]["content"][:1]
    plain = post(vision_server, "/v1/responses", body)
    assert resp.json()["usage"]["input_tokens"] > plain.json()["usage"]["input_tokens"] + 16


# ------------------------------------------------- images are sized from their headers (issue 31)


def png_bomb(side: int) -> bytes:
    """A valid one-colour PNG of side x side pixels, compressed row by row: ~780 KB for 18,000
    (it decodes to ~1 GB, which the old server did, seven seconds a copy)."""
    row = b"\x00" + bytes(3 * side)
    packer = zlib.compressobj(9)
    body = b"".join(packer.compress(row) for _ in range(side)) + packer.flush()

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", body) + chunk(b"IEND", b"")
    )


@pytest.fixture(scope="module")
def bomb() -> bytes:
    return png_bomb(18000)


def test_an_image_over_the_pixel_budget_is_refused_before_decoding(vision_server, bomb):
    assert len(bomb) < 1_500_000
    resp = post(vision_server, "/v1/chat/completions", chat_body(image_part(data_url(bomb))))
    assert resp.status_code == 400, resp.text
    message = resp.json()["error"]["message"]
    assert "18000 x 18000" in message and "--max-media-pixels" in message
    # three in one request: refused at the first, nothing of the others decoded
    three = chat_body(*[image_part(data_url(bomb))] * 3)
    resp = post(vision_server, "/v1/chat/completions", three)
    assert resp.status_code == 400 and "content.1.image_url" in resp.json()["error"]["message"]
    assert post(vision_server, "/v1/chat/completions", chat_body()).status_code == 200


def test_the_pixel_budget_is_per_request(vision_server, monkeypatch):
    monkeypatch.setattr(vision_server.state.settings, "max_media_pixels", 64 * 48 * 2)
    two = chat_body(image_part(data_url(IMG1)), image_part(data_url(IMG2)))
    assert post(vision_server, "/v1/chat/completions", two).status_code == 200
    three = chat_body(*[image_part(data_url(IMG1))] * 3)
    resp = post(vision_server, "/v1/chat/completions", three)
    assert resp.status_code == 400 and "content.3.image_url" in resp.json()["error"]["message"]


def test_media_per_request_are_capped(vision_server):
    many = chat_body(*[image_part(data_url(IMG1))] * 17)
    resp = post(vision_server, "/v1/chat/completions", many)
    assert resp.status_code == 400
    message = resp.json()["error"]["message"]
    assert "number 17 of the request is over this server's limit of 16" in message
    assert "--max-media or LLAMACTL_MAX_MEDIA" in message


def test_anthropic_and_responses_images_meet_the_same_budget(vision_server, bomb):
    resp = post(vision_server, "/v1/messages", anthropic_body(bomb))
    assert resp.status_code == 400
    body = resp.json()
    assert body["type"] == "error" and "--max-media-pixels" in body["error"]["message"]
    item = {"type": "input_image", "image_url": data_url(bomb)}
    responses = {
        "model": "m",
        "input": [{"role": "user", "content": [item]}],
        "max_output_tokens": 2,
    }
    resp = post(vision_server, "/v1/responses", responses)
    assert resp.status_code == 400 and "--max-media-pixels" in resp.json()["error"]["message"]


@pytest.mark.parametrize(
    ("data", "size"),
    [
        (png_bomb(3), (3, 3)),
        (
            b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
            b"\xff\xc0\x00\x11\x08\x01\xe0\x02\x80\x03",
            (640, 480),
        ),
        (b"GIF89a\x20\x00\x10\x00", (32, 16)),
        (b"BM" + bytes(12) + struct.pack("<Iii", 40, 7, -5), (7, 5)),
        (b"BM" + bytes(12) + struct.pack("<IHH", 12, 9, 4) + bytes(4), (9, 4)),
    ],
)
def test_image_headers_are_read_without_decoding(data, size):
    from llamactl.engine.image_header import read_image_header

    header = read_image_header(data)
    assert (header.width, header.height) == size
