"""The top-level `model` of a JSON request body, and where its value is in the body's bytes.

The router must know which model a request names before it can forward it, and a body may be
tens of megabytes: parsing one on the router's event loop (8 ms per MB) would stall every
model's streams meanwhile. Small bodies are scanned in the router; larger ones by this same
file run as a short-lived `python -I -S` process fed through a pipe (it imports the standard
library only, so it starts in about 25 ms): see `selection.locate_model`.

Knowing where the value is lets the router rename an alias by splicing the canonical name in,
leaving the rest of the body byte for byte as the client sent it.
"""

from __future__ import annotations

import json
import re
import sys

__all__ = ["model_member", "main"]

_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\n\r]*")


def _skip(text: str, i: int) -> int:
    return _SPACE.match(text, i).end()  # type: ignore[union-attr]  # always matches


def model_member(body: bytes) -> tuple[str, int, int] | None:
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
    name, start, end = found
    if not text.isascii():  # character offsets to byte offsets
        start, end = len(text[:start].encode()), len(text[:end].encode())
    return name, start, end


def main() -> None:
    """The scan as a process: the body on stdin, `[model, start, end]` or `null` on stdout."""
    found = model_member(sys.stdin.buffer.read())
    sys.stdout.write(json.dumps(found))


if __name__ == "__main__":
    main()
