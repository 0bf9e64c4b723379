"""Which model a request is for, and whether it may load it.

A JSON body names it in `model` (llama-server's rule for POST); a multipart upload (audio
transcription) in its `model` form field; anything else (GET, websocket handshakes) in the
`?model=` query, which is also the fallback when a body does not name one.

Finding it must not hold the event loop: a form is scanned with linear `find`s, a JSON body's
top-level members are decoded one by one (the same cost as json.loads, in the helper process
for a big body), and where the value is, is kept, so that an alias can be renamed by
splicing the canonical name in, the rest of the body byte for byte as the client sent it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from urllib.parse import parse_qs, parse_qsl, urlencode

from ..precheck import PRECHECK_BYTES, in_helper

_BOUNDARY = re.compile(r';\s*boundary="?([^";]{1,200})"?', re.IGNORECASE)
_NAMED_MODEL = re.compile(rb';\s*name="?model"?\s*(?:;|$)', re.IGNORECASE)
# A part's headers and the model's value are short, and a form has a few fields (OpenAI's
# transcription form about ten): beyond these bounds the body is not looked into further.
_MAX_PART_HEAD = 16 * 1024
_MAX_NAME = 1024
_MAX_PARTS = 100
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def query_params(query_string: bytes) -> dict[str, str]:
    """The first value of each query parameter."""
    parsed = parse_qs(query_string.decode("latin-1"), keep_blank_values=True)
    return {k: v[0] for k, v in parsed.items()}


def form_model_span(content_type: str, body: bytes) -> tuple[int, int] | None:
    """Where the value of a multipart body's `model` field is, or None.

    One pass of `find` over the body (linear in its size whatever it holds: a pattern over
    the whole body backtracked quadratically on a crafted upload, stalling the router).
    """
    found = _BOUNDARY.search(content_type)
    if found is None:
        return None
    delimiter = b"--" + found.group(1).strip().encode("latin-1")
    pos = body.find(delimiter)
    for _ in range(_MAX_PARTS):
        if pos < 0:
            return None
        line_end = body.find(b"\r\n", pos + len(delimiter), pos + len(delimiter) + 256)
        if line_end < 0 or body.startswith(b"--", pos + len(delimiter)):
            return None  # the closing delimiter, or not a part
        head_end = body.find(b"\r\n\r\n", line_end, line_end + _MAX_PART_HEAD)
        if head_end < 0:
            return None
        for line in body[line_end + 2 : head_end].split(b"\r\n"):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-disposition" and _NAMED_MODEL.search(value):
                start = head_end + 4
                end = body.find(b"\r\n", start, start + _MAX_NAME)
                return (start, end) if end >= 0 else None
        pos = body.find(b"\r\n" + delimiter, head_end)
        if pos >= 0:
            pos += 2
    return None


_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\n\r]*")


def _skip(text: str, i: int) -> int:
    return _SPACE.match(text, i).end()  # type: ignore[union-attr]  # always matches


def model_member(body: bytes) -> tuple[str, int, int] | None:  # also runs in the helper
    """(model, start, end): the body's top-level `model` string and the byte span of its JSON
    value, quotes included. None when the body is not a JSON object (UTF-8, as RFC 8259
    requires between systems) or has no non-empty string `model`. As with json.loads, the
    last `model` member wins."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return None
    found: tuple[object, int, int] | None = None
    try:
        i = _skip(text, 0)
        if text[i] != "{":
            return None
        i = _skip(text, i + 1)
        if text[i] != "}":
            while True:
                key, i = _DECODER.raw_decode(text, i)
                if not isinstance(key, str):
                    return None
                i = _skip(text, i)
                if text[i] != ":":
                    return None
                start = _skip(text, i + 1)
                value, end = _DECODER.raw_decode(text, start)
                if key == "model":
                    found = (value, start, end)
                i = _skip(text, end)
                if text[i] == "}":
                    break
                if text[i] != ",":
                    return None
                i = _skip(text, i + 1)
        if _skip(text, i + 1) != len(text):
            return None  # something after the object
    except (ValueError, IndexError, RecursionError):  # RecursionError: nested too deeply
        return None
    if found is None or not isinstance(found[0], str) or not found[0]:
        return None
    name, start, end = found[0], found[1], found[2]
    if not text.isascii():  # character offsets to byte offsets
        start, end = len(text[:start].encode()), len(text[:end].encode())
    return name, start, end


@dataclass(frozen=True)
class BodyModel:
    """The model a body names, and where its value is (a JSON string literal, or the raw
    text of a form field), so that renaming it leaves the rest of the body untouched."""

    name: str
    start: int
    end: int
    json: bool


def body_model(content_type: str, body: bytes) -> BodyModel | None:
    """The model the body names, scanned here: fine for a form (linear `find`s) and for a
    small JSON body; see `locate_model` for any body."""
    if not body:
        return None
    if content_type.lower().startswith("multipart/"):
        span = form_model_span(content_type, body)
        name = body[span[0] : span[1]].strip() if span else b""
        return BodyModel(name.decode("utf-8", "replace"), *span, False) if span and name else None
    found = model_member(body)  # a malformed body: the child answers it with its own 400
    return BodyModel(*found, True) if found else None


async def locate_model(content_type: str, body: bytes) -> BodyModel | None:
    """`body_model`, with a JSON body over PRECHECK_BYTES scanned in the server's helper
    process (server/precheck.py): parsing holds the GIL, and the router's event loop, which
    every stream of every model goes through, must never wait for one request's body."""
    if len(body) <= PRECHECK_BYTES or content_type.lower().startswith("multipart/"):
        return body_model(content_type, body)
    found = await in_helper(model_member, body)
    return BodyModel(*found, True) if found else None


def requested_model(query: dict[str, str], content_type: str, body: bytes) -> str | None:
    """The model named by the request, or None when it names none."""
    found = body_model(content_type, body)
    return found.name if found else query.get("model") or None


def rename_model(body: bytes, found: BodyModel, name: str) -> bytes:
    """The body with its `model` (where `found` says it is) set to `name`: a child knows its
    model by one name only, so an alias the client used becomes the model's canonical name."""
    value = json.dumps(name, ensure_ascii=False) if found.json else name
    return body[: found.start] + value.encode() + body[found.end :]


def with_query_model(query_string: bytes, name: str) -> bytes:
    """The query string with `model` (if present) set to `name`."""
    pairs = parse_qsl(query_string.decode("latin-1"), keep_blank_values=True)
    if not any(k == "model" for k, _ in pairs):
        return query_string
    return urlencode([(k, name if k == "model" else v) for k, v in pairs]).encode("latin-1")


def autoload_for(query: dict[str, str], default: bool) -> bool:
    """`?autoload=true|1` (or false|0) overrides --models-autoload for one request."""
    value = query.get("autoload", "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    return default
