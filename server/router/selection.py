"""Which model a request is for, and whether it may load it.

A JSON body names it in `model` (llama-server's rule for POST); a multipart upload (audio
transcription) in its `model` form field; anything else (GET, websocket handshakes) in the
`?model=` query, which is also the fallback when a body does not name one.
"""

from __future__ import annotations

import json
import re
from urllib.parse import parse_qs, parse_qsl, urlencode

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


def requested_model(query: dict[str, str], content_type: str, body: bytes) -> str | None:
    """The model named by the request, or None when it names none."""
    if body:
        if content_type.lower().startswith("multipart/"):
            span = form_model_span(content_type, body)
            name = body[span[0] : span[1]].strip() if span else b""
            if name:
                return name.decode("utf-8", "replace")
        else:
            name = _json_model(body)
            if name:
                return name
    return query.get("model") or None


def _json_model(body: bytes) -> str | None:
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None  # the child answers the malformed body with its own 400
    model = data.get("model") if isinstance(data, dict) else None
    return model if isinstance(model, str) and model else None


def rename_model(content_type: str, body: bytes, name: str) -> bytes:
    """The body with its `model` set to `name`: a child knows its model by one name only,
    so an alias the client used is replaced by the model's canonical name."""
    if content_type.lower().startswith("multipart/"):
        span = form_model_span(content_type, body)
        if span is None:
            return body
        return body[: span[0]] + name.encode() + body[span[1] :]
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return body
    if not isinstance(data, dict) or "model" not in data:
        return body
    data["model"] = name
    return json.dumps(data, ensure_ascii=False).encode()


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
