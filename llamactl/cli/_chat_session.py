"""A chat's conversation as a file: `/save FILE`, the last session `--continue` picks up.

One record for both, `{"model", "system", "messages"}`, written whole or not at all. Reading
one back trusts nothing: a regular file within a size bound, JSON of that shape, or a plain
error (InvalidRequestError) saying what is wrong with it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llamactl import (
    FileRefusedError,
    InvalidRequestError,
    atomic_output,
    open_regular,
    state_dir,
)

__all__ = [
    "MAX_SESSION_BYTES",
    "ChatHistory",
    "last_session_path",
    "read_session",
    "write_session",
]

MAX_SESSION_BYTES = 64 << 20  # far more text than any context holds
_ROLES = ("user", "assistant")


@dataclass
class ChatHistory:
    """Messages of one session; answers are kept without their reasoning, as templates
    expect."""

    system: str | None = None
    turns: list[dict[str, str]] = field(default_factory=list)

    def messages_for(self, question: str) -> list[dict[str, str]]:
        head = [{"role": "system", "content": self.system}] if self.system else []
        return [*head, *self.turns, {"role": "user", "content": question}]

    def add(self, question: str, answer: str) -> None:
        self.turns.append({"role": "user", "content": question})
        self.turns.append({"role": "assistant", "content": answer})

    def reset(self) -> None:
        self.turns.clear()


def last_session_path() -> Path:
    """Where every chat leaves its conversation for `llamactl chat --continue`."""
    return state_dir() / "last-chat.json"


def write_session(path: Path, model: str, history: ChatHistory) -> None:
    """The conversation as JSON at `path`, atomically (OSError when it cannot be written)."""
    record = {"model": model, "system": history.system, "messages": history.turns}
    with atomic_output(path) as f:
        f.write(json.dumps(record, indent=2, ensure_ascii=False).encode() + b"\n")


def read_session(path: Path) -> tuple[str | None, ChatHistory]:
    """The model name and conversation saved at `path`."""
    try:
        with open_regular(path, max_bytes=MAX_SESSION_BYTES) as f:
            raw = f.read()
    except FileNotFoundError:
        raise InvalidRequestError(f"no saved chat at {path}") from None
    except (OSError, FileRefusedError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise InvalidRequestError(f"cannot read the saved chat {path}: {reason}") from None
    try:
        record = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise InvalidRequestError(f"{path} is not a saved chat (not JSON)") from None
    return _model(record, path), ChatHistory(_system(record, path), _messages(record, path))


def _model(record: Any, path: Path) -> str | None:
    if not isinstance(record, dict):
        raise InvalidRequestError(f"{path} is not a saved chat (a JSON object was expected)")
    model = record.get("model")
    return model if isinstance(model, str) else None


def _system(record: dict[str, Any], path: Path) -> str | None:
    system = record.get("system")
    if system is not None and not isinstance(system, str):
        raise InvalidRequestError(f"{path}: `system` must be text or null")
    return system


def _messages(record: dict[str, Any], path: Path) -> list[dict[str, str]]:
    messages = record.get("messages")
    if not isinstance(messages, list):
        raise InvalidRequestError(f"{path}: `messages` must be a list")
    turns: list[dict[str, str]] = []
    for i, message in enumerate(messages):
        ok = isinstance(message, dict) and message.get("role") == _ROLES[i % 2]
        if not ok or not isinstance(message.get("content"), str):
            raise InvalidRequestError(
                f"{path}: message {i} must be {{'role': '{_ROLES[i % 2]}', 'content': text}} "
                "(questions and answers take turns)"
            )
        turns.append({"role": message["role"], "content": message["content"]})
    if len(turns) % 2:
        raise InvalidRequestError(f"{path}: the last question has no answer")
    return turns
