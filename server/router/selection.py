"""Which model a request is for, and whether it may load it.

A JSON body names it in `model` (llama-server's rule for POST); a multipart upload (audio
transcription) in its `model` form field; anything else (GET, websocket handshakes) in the
`?model=` query, which is also the fallback when a body does not name one.
"""

from __future__ import annotations

import json
import re
from urllib.parse import parse_qs, parse_qsl, urlencode

# The `model` part of a multipart/form-data body: its headers, a blank line, then the value.
_FORM_MODEL = re.compile(
    rb'content-disposition:[^\r\n]*\bname="model"[^\r\n]*\r\n(?:[^\r\n]+\r\n)*\r\n([^\r\n]*)\r\n',
    re.IGNORECASE,
)
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def query_params(query_string: bytes) -> dict[str, str]:
    """The first value of each query parameter."""
    parsed = parse_qs(query_string.decode("latin-1"), keep_blank_values=True)
    return {k: v[0] for k, v in parsed.items()}


def requested_model(query: dict[str, str], content_type: str, body: bytes) -> str | None:
    """The model named by the request, or None when it names none."""
    if body:
        if content_type.lower().startswith("multipart/"):
            match = _FORM_MODEL.search(body)
            if match and match.group(1).strip():
                return match.group(1).strip().decode("utf-8", "replace")
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
        match = _FORM_MODEL.search(body)
        if match is None:
            return body
        return body[: match.start(1)] + name.encode() + body[match.end(1) :]
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
