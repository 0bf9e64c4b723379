"""Tools for models whose chat template knows none (llama.cpp's "generic" tool format).

A template that never mentions `tools` drops them, so without this no client would ever get a
call from such a model (SmolLM2, base models, llama.cpp's built-in formats). Instead the tools
are described in the system message, the reply is constrained to one JSON object, either
`{"tool_call": {"name": ..., "arguments": {...}}}` or `{"response": "..."}`, and past calls and
results are written into the history the same way, so the model reads its own format back.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from llamactl.engine.chat.markers import ThinkingMarkers
from llamactl.engine.chat.messages import Message, content_text
from llamactl.engine.chat.reasoning import ChatDelta
from llamactl.engine.chat.tool_formats import grammars as gr
from llamactl.engine.chat.tool_formats.gbnf import GrammarBuilder, alternatives, literal
from llamactl.engine.chat.tools import after_reasoning, chosen_tools, make_tool_call_id, tool_specs
from llamactl.engine.types import ContentDelta, ToolCallDelta

__all__ = [
    "GenericReplyParser",
    "answers_allowed",
    "generic_grammar",
    "generic_messages",
]

RESPONSE_HEAD = '{"response": "'
CALL_HEAD = '{"tool_call": '
CALLS_HEAD = '{"tool_calls": ['
_HEADS = (RESPONSE_HEAD, CALL_HEAD, CALLS_HEAD)


def _instructions(tools: Sequence[Mapping[str, Any]], *, answer: bool, parallel: bool) -> str:
    """The system text that teaches the format: the tools and the shape of a reply."""
    listed = "\n".join(json.dumps(_described(tool), ensure_ascii=False) for tool in tools)
    call = '{"tool_call": {"name": "<tool name>", "arguments": {<the arguments>}}}'
    lines = [
        "You can call these tools (one JSON object per line):",
        listed,
        "",
        "Reply with exactly one JSON object and nothing else.",
        f"To call a tool: {call}",
    ]
    if parallel:
        lines.append('To call several at once: {"tool_calls": [{"name": ..., "arguments": ...}]}')
    if answer:
        lines.append('To answer the user directly: {"response": "<your answer>"}')
    lines.append('A tool\'s result comes back in a user message {"tool_response": ...}.')
    return "\n".join(lines)


def _described(tool: Mapping[str, Any]) -> dict[str, Any]:
    function = tool.get("function", tool)
    keys = ("name", "description", "parameters")
    return {key: function[key] for key in keys if function.get(key) is not None}


def generic_messages(
    messages: Sequence[Message],
    tools: Sequence[Mapping[str, Any]] | None,
    *,
    answer: bool = True,
    parallel: bool = False,
    continued: bool = False,
) -> list[Message]:
    """`messages` for a template without tools: the tools described in the system message
    (when `tools`), each past call as the assistant's JSON, each result as a user message.
    With tools described, a past answer is written as the reply object the model wrote
    (`{"response": ...}`), unless it is the last message and `continued` (a prefill)."""
    names: dict[str, str] = {}  # tool_call_id -> tool name, for results that do not say
    out: list[Message] = []
    last = len(messages) - 1
    for i, message in enumerate(messages):
        role = message.get("role")
        if role == "assistant" and message.get("tool_calls"):
            out.append(_assistant_calls(message, names))
        elif role == "assistant" and tools and not (continued and i == last):
            out.append(_answer(message))
        elif role == "tool":
            out.append(_tool_result(message, names))
        else:
            out.append(message)
    if tools:
        text = _instructions(tools, answer=answer, parallel=parallel)
        if out and out[0].get("role") == "system":
            first = out[0]
            own = content_text(first.get("content"))
            out[0] = {**first, "content": f"{own}\n\n{text}" if own else text}
        else:
            out.insert(0, {"role": "system", "content": text})
    return out


def _assistant_calls(message: Message, names: dict[str, str]) -> Message:
    calls = []
    for call in message.get("tool_calls") or ():
        function = call.get("function", call) if isinstance(call, Mapping) else {}
        name = str(function.get("name", ""))
        arguments = function.get("arguments", {})
        if isinstance(arguments, str):
            with contextlib.suppress(ValueError):  # else kept as the text the client sent
                arguments = json.loads(arguments)
        if isinstance(call, Mapping) and call.get("id"):
            names[str(call["id"])] = name
        calls.append({"name": name, "arguments": arguments})
    reply: dict[str, Any] = {"tool_call": calls[0]} if len(calls) == 1 else {"tool_calls": calls}
    text = content_text(message.get("content"))
    if text:
        reply = {"response": text, **reply}
    out = {k: v for k, v in message.items() if k != "tool_calls"}
    out["content"] = json.dumps(reply, ensure_ascii=False)
    return out


def _answer(message: Message) -> Message:
    text = content_text(message.get("content"))
    return {**message, "content": json.dumps({"response": text}, ensure_ascii=False)}


def _tool_result(message: Message, names: dict[str, str]) -> Message:
    call_id = message.get("tool_call_id")
    result: dict[str, Any] = {}
    name = message.get("name") or names.get(str(call_id))
    if name:
        result["tool"] = name
    if call_id:
        result["tool_call_id"] = call_id
    result["content"] = content_text(message.get("content"))
    return {"role": "user", "content": json.dumps({"tool_response": result}, ensure_ascii=False)}


def generic_grammar(
    tools: Sequence[Mapping[str, Any]],
    tool_choice: Any = "auto",
    *,
    parallel: bool = False,
    reasoning: ThinkingMarkers | None = None,
    reasoning_open: bool = False,
) -> str:
    """GBNF for one reply object: a call (several with `parallel`) of the tools `tool_choice`
    allows, or, when calling is optional, the answer as text."""
    specs = tool_specs(tools)
    chosen = chosen_tools(specs, tool_choice)
    g = GrammarBuilder()
    # spaced as the history renders calls and answers back (`json.dumps`): a reply read
    # back is the very text the model wrote, and the next turn reuses its tokens
    build = gr.json_object_call(canonical=True)
    options = [gr.calls(g, chosen or specs, False, build, before=CALL_HEAD, after="}")]
    if parallel:
        many = gr.calls(g, chosen or specs, True, build, separator=", ", before=CALLS_HEAD)
        options.append(f"{many} {literal(']}')}")
    if chosen is None:
        text = g.schema({"type": "string"}, canonical=True)
        options.append(f"{literal(RESPONSE_HEAD[:-1])} {text} {literal('}')}")
    return g.render(after_reasoning(alternatives(options), reasoning, reasoning_open))


def answers_allowed(tool_choice: Any) -> bool:
    """Whether a reply may be text rather than a call ("auto"; not "required" or a name)."""
    return tool_choice is None or tool_choice in ("auto", "none")


class GenericReplyParser:
    """DeltaStage: the reply object in, its answer text (streamed) or its calls out.

    Text that is none of the reply shapes (a model writing freely, e.g. without the grammar) is
    passed on as content; a call that does not parse is content too, unless the answer was cut
    (`cut_off`), when it is dropped like any unfinished call.
    """

    def __init__(self, index: int = 0, id_factory: Callable[[], str] | None = None) -> None:
        self.index = index
        self._new_id = id_factory or make_tool_call_id
        self._raw = ""  # content seen so far
        self._mode: str | None = None  # "text", "answer", "call" once decided
        self._sent: int | None = None  # in "answer": raw offset of what is not yet decoded
        self._answer_done = False
        self._calls = 0
        self._cut = False

    @property
    def calls(self) -> int:
        return self._calls

    def cut_off(self) -> None:
        self._cut = True

    def push(self, delta: ChatDelta) -> list[ChatDelta]:
        if not isinstance(delta, ContentDelta):
            return [delta]
        self._raw += delta.text
        return self._drain()

    def finish(self) -> list[ChatDelta]:
        out = self._drain()
        if self._mode is None:  # a prefix of a reply object, or nothing
            self._mode = "text"
            text, self._raw = self._raw, ""
            if not self._cut:  # cut, it is the start of a call or an empty answer: dropped
                out += self._content(text)
        elif self._mode == "call":
            out += self._finish_call()
        elif self._mode == "answer" and not self._answer_done and self._sent is not None:
            out += self._content(self._raw[self._sent :])  # an answer cut short: its raw rest
        return out

    def _drain(self) -> list[ChatDelta]:
        if self._mode is None:
            self._mode = self._decide()
            if self._mode is None:
                return []
        if self._mode == "text":
            text, self._raw = self._raw, ""
            return self._content(text)
        if self._mode == "answer":
            return self._decode_answer()
        return []  # a call is read whole at the end

    def _decide(self) -> str | None:
        head = self._raw.lstrip()
        for known in _HEADS:
            if head.startswith(known):
                return "answer" if known == RESPONSE_HEAD else "call"
        if head == "" or any(known.startswith(head) for known in _HEADS):
            return None  # could still become one of them
        return "text"

    def _decode_answer(self) -> list[ChatDelta]:
        if self._answer_done:
            return []
        if self._sent is None:
            self._sent = self._raw.index(RESPONSE_HEAD) + len(RESPONSE_HEAD)
        body = self._raw[self._sent :]
        end, closed = _string_prefix(body)
        if end == 0 and not closed:
            return []
        try:
            text = json.loads('"' + body[:end] + '"')
        except ValueError:  # not JSON's escapes (a model writing without the grammar)
            text = body[:end]
        self._sent += end + (1 if closed else 0)
        self._answer_done = closed
        return self._content(text)

    def _finish_call(self) -> list[ChatDelta]:
        try:
            reply = json.loads(self._raw)
        except ValueError:
            reply = None
        calls = _calls_in(reply)
        if calls is None:
            return [] if self._cut else self._content(self._raw)
        out: list[ChatDelta] = []
        for name, arguments in calls:
            out.append(
                ToolCallDelta(self._calls, self._new_id(), name, arguments, index=self.index)
            )
            self._calls += 1
        return out

    def _content(self, text: str) -> list[ChatDelta]:
        return [ContentDelta(text, self.index)] if text else []


def _string_prefix(body: str) -> tuple[int, bool]:
    """How much of a JSON string's body (after its opening quote) decodes now, and whether its
    closing quote was reached; an escape cut in two, or a high surrogate whose low half has not
    come, waits."""
    i = 0
    safe = 0
    while i < len(body):
        ch = body[i]
        if ch == '"':
            return i, True
        if ch != "\\":
            i += 1
            safe = i
            continue
        if i + 1 >= len(body):
            break
        if body[i + 1] != "u":
            i += 2
            safe = i
            continue
        if i + 6 > len(body):
            break
        code = int(body[i + 2 : i + 6], 16) if _hex(body[i + 2 : i + 6]) else 0
        i += 6
        if 0xD800 <= code < 0xDC00:  # needs its low surrogate in the same piece
            if i + 6 > len(body):
                break
            i += 6
        safe = i
    return safe, False


def _hex(text: str) -> bool:
    return len(text) == 4 and all(c in "0123456789abcdefABCDEF" for c in text)


def _calls_in(reply: Any) -> list[tuple[str, str]] | None:
    """(name, arguments JSON) of each call in a parsed reply object, or None if it has none."""
    if not isinstance(reply, dict):
        return None
    if isinstance(reply.get("tool_call"), dict):
        items = [reply["tool_call"]]
    elif isinstance(reply.get("tool_calls"), list) and reply["tool_calls"]:
        items = reply["tool_calls"]
    else:
        return None
    calls = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            return None
        arguments = item.get("arguments", {})
        if isinstance(arguments, str):
            calls.append((item["name"], arguments))
        else:
            calls.append((item["name"], json.dumps(arguments, ensure_ascii=False)))
    return calls
