"""Chat events → Anthropic content blocks, and the stream events that build them.

One builder serves both answers, so a streamed message and a non-streamed one always hold the
same blocks. Blocks are sequential, as Anthropic streams them: a block is stopped before the next
one starts (thinking gets its `signature_delta` first), which puts thinking at index 0, the text
next and tool_use blocks after it for a model that thinks, answers, then calls tools.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

from llamactl import ChatEvent, ContentDelta, ReasoningDelta, ToolCallDelta

from ...common import new_id

Event = dict[str, Any]


def thinking_signature(thinking: str) -> str:
    """A digest of the thinking text. Anthropic's signature proves the text came from its model;
    a local server has nothing to prove, but clients that keep thinking blocks only when they
    carry a signature (and resend them) need a non-empty one."""
    return base64.b64encode(hashlib.sha256(thinking.encode("utf-8")).digest()).decode("ascii")


def tool_input(arguments: str) -> dict[str, Any]:
    """A tool call's arguments as an object; anything else becomes {} (llama-server's rule)."""
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def tool_use_id(parsed_id: str) -> str:
    """Anthropic clients expect `toolu_` ids; keep the parser's id only when it is one."""
    return parsed_id if parsed_id.startswith("toolu_") else new_id("toolu_")


class BlockBuilder:
    """Feed chat events of one choice; read `content` at the end, or stream the returned events."""

    def __init__(self, *, keep_thinking: bool = True, omit_thinking_text: bool = False) -> None:
        self.keep_thinking = keep_thinking
        self.omit_thinking_text = omit_thinking_text
        self.content: list[dict[str, Any]] = []
        self.has_tool_use = False
        self._open: str | None = None  # type of the block being written
        self._parts: list[str] = []  # text of the open thinking / text block

    def feed(self, event: ChatEvent) -> list[Event]:
        if isinstance(event, ReasoningDelta):
            return self._thinking(event.text) if self.keep_thinking and event.text else []
        if isinstance(event, ContentDelta):
            return self._text(event.text) if event.text else []
        if isinstance(event, ToolCallDelta):
            return self._tool_use(event)
        return []

    def close(self) -> list[Event]:
        """Stop the open block; call once the generation is done."""
        if self._open is None:
            return []
        index = len(self.content) - 1
        block = self.content[index]
        events: list[Event] = []
        text = "".join(self._parts)
        if self._open == "thinking":
            block["signature"] = thinking_signature(text)
            if not self.omit_thinking_text:
                block["thinking"] = text
            delta = {"type": "signature_delta", "signature": block["signature"]}
            events.append(_delta(index, delta))
        elif self._open == "text":
            block["text"] = text
        events.append({"type": "content_block_stop", "index": index})
        self._open = None
        self._parts = []
        return events

    # ------------------------------------------------------------------------------ blocks
    def _start(self, kind: str, block: dict[str, Any]) -> list[Event]:
        events = self.close() if self._open is not None else []
        self.content.append(block)
        self._open = kind
        start = {"type": "content_block_start", "index": len(self.content) - 1}
        start["content_block"] = dict(block)
        events.append(start)
        return events

    def _thinking(self, text: str) -> list[Event]:
        events = []
        if self._open != "thinking":
            events = self._start("thinking", {"type": "thinking", "thinking": "", "signature": ""})
        self._parts.append(text)
        if not self.omit_thinking_text:
            index = len(self.content) - 1
            events.append(_delta(index, {"type": "thinking_delta", "thinking": text}))
        return events

    def _text(self, text: str) -> list[Event]:
        events = []
        if self._open != "text":
            events = self._start("text", {"type": "text", "text": ""})
        self._parts.append(text)
        events.append(_delta(len(self.content) - 1, {"type": "text_delta", "text": text}))
        return events

    def _tool_use(self, call: ToolCallDelta) -> list[Event]:
        """Calls arrive complete, so the block starts, gets its whole input and stops at once."""
        arguments = tool_input(call.arguments)
        block = {"type": "tool_use", "id": tool_use_id(call.id), "name": call.name, "input": {}}
        events = self._start("tool_use", block)
        index = len(self.content) - 1
        partial = json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))
        events.append(_delta(index, {"type": "input_json_delta", "partial_json": partial}))
        block["input"] = arguments
        self.has_tool_use = True
        events.extend(self.close())
        return events


def _delta(index: int, delta: dict[str, Any]) -> Event:
    return {"type": "content_block_delta", "index": index, "delta": delta}
