"""Images and audio in chat messages: content parts → media markers and the media's bytes.

Every API family reaches the chat model with OpenAI-shaped messages (Responses `input_image`
and Anthropic `image` blocks are mapped onto `image_url` parts by their converters); here each
`image_url` / `input_audio` part becomes a text part holding the model's media marker, and its
bytes go into `ChatRequest.media`, in order, as llama-server does. Where the bytes come from
follows llama-server's rules, minus the network: a `data:` URL or raw base64, or a `file://`
path relative to `--media-path`; an http(s) URL is refused (llamactl never downloads).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from llamactl import (
    UNSUPPORTED_MEDIA_MESSAGES,
    ChatRequest,
    FileRefusedError,
    FileTooLargeError,
    MediaInput,
    open_regular,
)

from .errors import bad_request
from .media_budget import MediaBudget
from .state import ServerState

__all__ = ["MEDIA_PART_TYPES", "load_media_url", "take_media"]

MiB = 1 << 20

# part type -> (the media kind, the key holding the part's object)
MEDIA_PART_TYPES: dict[str, tuple[Literal["image", "audio"], str]] = {
    "image_url": ("image", "image_url"),
    "input_audio": ("audio", "input_audio"),
}


def take_media(state: ServerState, request: ChatRequest) -> ChatRequest:
    """The request with its media parts replaced by markers and their bytes in `media`;
    unchanged when it has none. Raises a 400 for media the model cannot read or load."""
    if not any(_has_media(m) for m in request.messages):
        return request
    chat = state.require_chat()
    marker = chat.media_marker
    budget = MediaBudget.from_settings(state.settings)
    media: list[MediaInput] = []
    messages: list[dict[str, Any]] = []
    for i, message in enumerate(request.messages):
        content = message.get("content")
        if not isinstance(content, list) or not _has_media(message):
            messages.append(message)
            continue
        parts: list[Any] = []
        for j, part in enumerate(content):
            kind_key = (
                MEDIA_PART_TYPES.get(str(part.get("type"))) if isinstance(part, Mapping) else None
            )
            if kind_key is None:
                parts.append(part)
                continue
            kind, key = kind_key
            if not chat.supports(kind):
                raise bad_request(UNSUPPORTED_MEDIA_MESSAGES[kind])
            where = f"messages.{i}.content.{j}.{key}"
            budget.take_slot(where)
            data = _part_bytes(state, part, kind, key, where)
            budget.check(data, kind, where)
            media.append(MediaInput(data, kind))
            parts.append({"type": "text", "text": marker})
        messages.append({**message, "content": parts})
    return dataclasses.replace(request, messages=messages, media=tuple(media))


def _has_media(message: Mapping[str, Any]) -> bool:
    content = message.get("content")
    return isinstance(content, list) and any(
        isinstance(p, Mapping) and p.get("type") in MEDIA_PART_TYPES for p in content
    )


def _part_bytes(state: ServerState, part: Mapping[str, Any], kind: str, key: str, where: str):
    value = part.get(key)
    if not isinstance(value, Mapping):
        raise bad_request(f"Field '{where}' must be an object")
    url = value.get("url") if kind == "image" else value.get("data", value.get("url"))
    if not isinstance(url, str) or not url:
        field = "url" if kind == "image" else "data"
        raise bad_request(f"Field '{where}.{field}' is required")
    limit = state.settings.max_media_file_mib * MiB
    return load_media_url(url, state.settings.media_path, where=where, max_file_bytes=limit)


def load_media_url(
    url: str, media_path: Path | None, *, where: str = "url", max_file_bytes: int | None = None
) -> bytes:
    """The bytes a media URL names: `data:image|audio/...;base64,...`, raw base64, or
    `file://RELATIVE` under `media_path` (a regular file of at most `max_file_bytes`).
    http(s) URLs are refused: no downloads."""
    if url.startswith(("http://", "https://")):
        raise bad_request(
            f"Field '{where}': remote media URLs are not supported (llamactl never downloads); "
            "send the file as a base64 data URL, or as file://NAME with --media-path"
        )
    if url.startswith("file://"):
        return _local_file(url[len("file://") :], media_path, where, max_file_bytes)
    if url.startswith("data:"):
        head, sep, payload = url.partition(",")
        if not sep:
            raise bad_request(f"Field '{where}': Invalid uri-encoded base64 value")
        if not head.startswith(("data:image/", "data:audio/", "data:video/")):
            raise bad_request(f"Field '{where}': Invalid uri format: {head}")
        if not head.endswith("base64"):
            raise bad_request(f"Field '{where}': uri must be base64 encoded")
        return _b64(payload, where)
    return _b64(url, where)


def _b64(text: str, where: str) -> bytes:
    try:
        data = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        data = b""
    if not data:
        raise bad_request(f"Field '{where}': Invalid base64 value")
    return data


def _local_file(name: str, media_path: Path | None, where: str, max_bytes: int | None) -> bytes:
    """llama-server's `--media-path` rule: a relative path, no `..`, inside the directory
    (symlinks resolved). Only a regular file is read, and only when its size (fstat) is within
    `max_bytes`: a FIFO would hold a preparation worker forever, a huge file the memory."""
    if media_path is None:
        raise bad_request("file:// URLs are not allowed unless --media-path is specified")
    rel = PurePosixPath(name)
    if not name or rel.is_absolute() or ".." in rel.parts or "\\" in name or "\x00" in name:
        raise bad_request(f"Field '{where}': file path is not allowed: {name}")
    root = media_path.resolve()
    path = (root / rel).resolve()
    if not path.is_relative_to(root):
        raise bad_request(f"Field '{where}': file path is not allowed: {name}")
    try:
        with open_regular(path, max_bytes=max_bytes) as f:
            return f.read()
    except FileTooLargeError as exc:
        raise bad_request(
            f"Field '{where}': file {name} is {exc.size} bytes, over this server's limit of "
            f"{exc.limit // MiB} MiB for a media file (--max-media-file-mib or "
            "LLAMACTL_MAX_MEDIA_FILE_MIB raises it)"
        ) from None
    except FileRefusedError:
        raise bad_request(f"Field '{where}': file {name} is not a regular file") from None
    except OSError:
        raise bad_request(
            f"Field '{where}': file does not exist or cannot be opened: {name}"
        ) from None
