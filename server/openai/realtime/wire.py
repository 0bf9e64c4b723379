"""JSON framing of realtime events: client text frames in, server events out.

A client frame can hold strings that have no UTF-8 form (`"\\ud800"` is valid JSON but a lone
surrogate), nesting deep enough to exhaust the parser's recursion, or a 15 MiB base64 append:
each is either refused here as a `ProtocolError` naming where it is, or (for size) parsed on a
worker thread by the caller. Server events (the protocol's models) are serialized here, once,
when queued, so the writer only sends text and the queue can be measured in bytes.
"""

from __future__ import annotations

import json
from typing import Any

from llamactl.realtime.errors import ProtocolError
from llamactl.realtime.protocol import ServerEvent

__all__ = ["OFF_LOOP_CHARS", "decode_event", "encode_event", "lone_surrogate_at"]

OFF_LOOP_CHARS = 256 * 1024  # frames (and appends) larger than this are handled off the loop

_MAX_PARAM = 120  # a path echoed in an error is cut here: keys come from the client


def decode_event(text: str) -> dict[str, Any]:
    """The client event in a text frame: a JSON object with a string `type`."""
    try:
        client_event = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(f"invalid JSON: {exc}", code="invalid_json") from None
    if not isinstance(client_event, dict) or not isinstance(client_event.get("type"), str):
        raise ProtocolError(
            "a client event is a JSON object with a string 'type'",
            code="invalid_event",
            param="type",
        )
    where = lone_surrogate_at(client_event)
    if where is not None:
        where = where if len(where) <= _MAX_PARAM else where[: _MAX_PARAM - 3] + "..."
        raise ProtocolError(
            f"{where} holds a lone surrogate (such as \\ud800), which is not valid Unicode",
            param=where,
        )
    return client_event


def lone_surrogate_at(value: Any) -> str | None:
    """The path (`item.content[0].text`) of the first string, key included, that cannot be
    encoded as UTF-8, or None. Iterative, so no nesting depth can overflow the stack."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, str):
            if not _encodable(node):
                return path or "event"
        elif isinstance(node, dict):
            for key, child in node.items():
                if not _encodable(key):
                    return f"{path}.<key>" if path else "<key>"
                stack.append((f"{path}.{key}" if path else key, child))
        elif isinstance(node, list):
            stack.extend((f"{path}[{i}]", child) for i, child in enumerate(node))
    return None


def _encodable(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def encode_event(event: ServerEvent) -> str:
    """A server event as the text of one frame. Text that came from elsewhere (a model, a
    transcript) with a lone surrogate in it is sent escaped rather than failing the socket."""
    message = event.wire()
    text = json.dumps(message, ensure_ascii=False)
    if _encodable(text):
        return text
    return json.dumps(message, ensure_ascii=True)
