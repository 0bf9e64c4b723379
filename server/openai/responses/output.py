"""Chat events → Responses output items, and the stream events that build them (spec §13.3).

Both modes run the same builder, so a non-stream response is exactly what the stream's
`response.completed` carries. Events come back without `sequence_number`; the writer numbers
them, as only it knows what else went on the wire.
"""

from __future__ import annotations

import secrets
from typing import Any

from llamactl import ChatEvent, ContentDelta, Done, ReasoningDelta, ToolCallDelta

Event = dict[str, Any]


def make_id(prefix: str) -> str:
    """`resp_`, `msg_`, `rs_`... followed by 32 random characters, as llama-server does."""
    return prefix + secrets.token_hex(16)


# A new item's leading whitespace waits for real text: a newline the model writes before a
# tool call must not become an output message of its own.
_WAITING = ""


class OutputBuilder:
    """Assembles one choice's output items from its chat events."""

    def __init__(self, *, parallel_tool_calls: bool = True) -> None:
        self.output: list[dict[str, Any]] = []
        self.reasoning = ""  # all reasoning text, for usage
        self.truncated = False
        self._parallel = parallel_tool_calls
        self._open: dict[str, Any] | None = None  # the reasoning or message item taking deltas
        self._open_text = ""
        self._pending: tuple[str, str] | None = None  # (kind, whitespace) not yet opened
        self._calls = 0

    # -------------------------------------------------------------------------- feeding
    def feed(self, event: ChatEvent) -> list[Event]:
        if isinstance(event, ReasoningDelta):
            self.reasoning += event.text
            return self._delta("reasoning", event.text)
        if isinstance(event, ContentDelta):
            return self._delta("message", event.text)
        if isinstance(event, ToolCallDelta):
            return self._tool_call(event)
        if isinstance(event, Done):
            return self.finish(truncated=event.finish_reason == "length")
        return []

    def finish(self, *, truncated: bool) -> list[Event]:
        """Close what is open. A finished answer without message or call gets an empty message,
        so clients always find one; a cut one ends where it was cut."""
        self.truncated = truncated
        self._pending = None
        events = self._close("incomplete" if truncated else "completed")
        answered = any(item["type"] != "reasoning" for item in self.output)
        if not answered and not (truncated and self.output):
            events += self._open_item("message")
            events += self._close("incomplete" if truncated else "completed")
        return events

    def _delta(self, kind: str, text: str) -> list[Event]:
        if not text:
            return []
        events: list[Event] = []
        if self._open is None or self._open["type"] != kind:
            if not text.strip():
                held = self._pending[1] if self._pending and self._pending[0] == kind else _WAITING
                self._pending = (kind, held + text)
                return []
            if self._pending and self._pending[0] == kind:
                text = self._pending[1] + text
            self._pending = None
            events += self._close("completed")
            events += self._open_item(kind)
        item = self._open
        assert item is not None
        self._open_text += text
        index = len(self.output) - 1
        if kind == "reasoning":
            events.append(
                {
                    "type": "response.reasoning_text.delta",
                    "item_id": item["id"],
                    "output_index": index,
                    "content_index": 0,
                    "delta": text,
                }
            )
        else:
            events.append(
                {
                    "type": "response.output_text.delta",
                    "item_id": item["id"],
                    "output_index": index,
                    "content_index": 0,
                    "delta": text,
                    "logprobs": [],
                }
            )
        return events

    def _tool_call(self, call: ToolCallDelta) -> list[Event]:
        if not self._parallel and self._calls:
            return []  # parallel_tool_calls=false: the first call only
        self._calls += 1
        self._pending = None
        events = self._close("completed")
        # The parser's id is kept as the call id: some templates check its form when it
        # comes back (Mistral's 9 characters). The item id shares its random part.
        call_id = call.id or make_id("call_")
        item = {
            "id": "fc_" + call_id.removeprefix("call_"),
            "type": "function_call",
            "status": "in_progress",
            "arguments": "",
            "call_id": call_id,
            "name": call.name,
        }
        self.output.append(item)
        index = len(self.output) - 1
        events.append(_added(index, item))
        item["arguments"] = call.arguments
        item["status"] = "completed"
        if call.arguments:
            events.append(
                {
                    "type": "response.function_call_arguments.delta",
                    "item_id": item["id"],
                    "output_index": index,
                    "delta": call.arguments,
                }
            )
        events.append(
            {
                "type": "response.function_call_arguments.done",
                "item_id": item["id"],
                "output_index": index,
                "name": call.name,
                "arguments": call.arguments,
            }
        )
        events.append(_item_done(index, item))
        return events

    # ------------------------------------------------------------------- open / close
    def _open_item(self, kind: str) -> list[Event]:
        if kind == "reasoning":
            item: dict[str, Any] = {
                "id": make_id("rs_"),
                "type": "reasoning",
                "summary": [],
                "content": [],
                "encrypted_content": "",
                "status": "in_progress",
            }
        else:
            item = {
                "id": make_id("msg_"),
                "type": "message",
                "status": "in_progress",
                "role": "assistant",
                "content": [],
            }
        self.output.append(item)
        self._open, self._open_text = item, ""
        index = len(self.output) - 1
        events = [_added(index, item)]
        if kind == "message":
            events.append(
                {
                    "type": "response.content_part.added",
                    "item_id": item["id"],
                    "output_index": index,
                    "content_index": 0,
                    "part": _output_text(""),
                }
            )
        return events

    def _close(self, status: str) -> list[Event]:
        item, text = self._open, self._open_text
        if item is None:
            return []
        self._open, self._open_text = None, ""
        index = self.output.index(item)
        item["status"] = status
        if item["type"] == "reasoning":
            item["content"] = [{"type": "reasoning_text", "text": text}]
            done: Event = {
                "type": "response.reasoning_text.done",
                "item_id": item["id"],
                "output_index": index,
                "content_index": 0,
                "text": text,
            }
            return [done, _item_done(index, item)]
        part = _output_text(text)
        item["content"] = [part]
        return [
            {
                "type": "response.output_text.done",
                "item_id": item["id"],
                "output_index": index,
                "content_index": 0,
                "text": text,
                "logprobs": [],
            },
            {
                "type": "response.content_part.done",
                "item_id": item["id"],
                "output_index": index,
                "content_index": 0,
                "part": dict(part),
            },
            _item_done(index, item),
        ]


def _output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _snapshot(item: dict[str, Any]) -> dict[str, Any]:
    # Events carry the item as it is now; the builder keeps mutating its own copy.
    out = dict(item)
    if isinstance(out.get("content"), list):
        out["content"] = [dict(part) for part in out["content"]]
    return out


def _added(index: int, item: dict[str, Any]) -> Event:
    return {"type": "response.output_item.added", "output_index": index, "item": _snapshot(item)}


def _item_done(index: int, item: dict[str, Any]) -> Event:
    return {"type": "response.output_item.done", "output_index": index, "item": _snapshot(item)}


def output_text(output: list[dict[str, Any]]) -> str:
    """All output_text of the message items, as the SDKs' `output_text` computes it."""
    return "".join(
        part["text"]
        for item in output
        if item["type"] == "message"
        for part in item["content"]
        if part["type"] == "output_text"
    )
