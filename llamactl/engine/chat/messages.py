"""Turning OpenAI-style messages into the shapes chat templates were written for.

Templates disagree on the details: some iterate typed content parts, others concatenate strings;
some want tool-call arguments as a dict, others as the JSON string the API carries; a few never
accept a system message. `Encoding` names one set of choices, and the template renderer tries
them in order until one renders cleanly.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llamactl.core.errors import InvalidRequestError

Message = Mapping[str, Any]

TEXT_PART_TYPES = frozenset({"text", "input_text", "output_text"})
PART_SEPARATOR = "\n\n"
REASONING_ALIASES = ("reasoning", "thinking")


@dataclass(frozen=True)
class Encoding:
    """One way of presenting messages to a template."""

    keep_parts: bool = True
    dict_arguments: bool = True
    merge_system: bool = False


def part_texts(content: Any) -> list[str]:
    """The texts of a message's content: a str, or a list of typed parts (non-text rejected)."""
    if content is None:
        return []
    if isinstance(content, str):
        return [content]
    if not isinstance(content, Sequence):
        raise InvalidRequestError(f"message content must be a string or a list, not {content!r}")
    texts = []
    for part in content:
        if isinstance(part, str):
            texts.append(part)
            continue
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind not in TEXT_PART_TYPES:
            raise InvalidRequestError(
                f"content parts of type {kind!r} are not supported; this model takes text only"
            )
        texts.append(str(part.get("text", "")))
    return texts


def content_text(content: Any) -> str:
    """Content as one string; text parts are joined by a blank line, as an API client expects."""
    return PART_SEPARATOR.join(part_texts(content))


def _text_parts(content: Any) -> list[dict[str, str]]:
    # Normalise every part to {"type": "text", "text": ...} so templates see one spelling.
    return [{"type": "text", "text": text} for text in part_texts(content)]


def _arguments(raw: Any, as_dict: bool) -> Any:
    if as_dict:
        if isinstance(raw, str):
            try:
                parsed = json.loads(raw) if raw.strip() else {}
            except json.JSONDecodeError:
                return raw
            return parsed if isinstance(parsed, dict) else raw
        return raw
    if isinstance(raw, str):
        return raw
    return json.dumps(raw, ensure_ascii=False)


def _tool_call(call: Any, as_dict: bool) -> Any:
    if not isinstance(call, Mapping):
        return call
    call = dict(call)
    function = call.get("function")
    if isinstance(function, Mapping) and "arguments" in function:
        call["function"] = {**function, "arguments": _arguments(function["arguments"], as_dict)}
    elif "arguments" in call:
        call["arguments"] = _arguments(call["arguments"], as_dict)
    return call


def _merge_system(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # For templates that refuse a system role: prepend its text to the first user message.
    if not messages or messages[0].get("role") != "system":
        return messages
    system_text = content_text(messages[0].get("content"))
    rest = messages[1:]
    for index, message in enumerate(rest):
        if message.get("role") == "user":
            merged = dict(message)
            user_text = content_text(message.get("content"))
            merged["content"] = f"{system_text}{PART_SEPARATOR}{user_text}"
            return [*rest[:index], merged, *rest[index + 1 :]]
    return [{"role": "user", "content": system_text}, *rest]


def check_messages(messages: Sequence[Any]) -> None:
    """Refuse what no template can render, before any template sees it."""
    for message in messages:
        if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
            raise InvalidRequestError(f"each message must be an object with a 'role': {message!r}")


def encode_messages(
    messages: Sequence[Message], encoding: Encoding, *, alias_reasoning: bool
) -> list[dict[str, Any]]:
    """Copies of `messages` shaped per `encoding`; the caller's dicts are never mutated."""
    encoded: list[dict[str, Any]] = []
    for message in messages:
        out = dict(message)
        content = out.get("content")
        if content is None:
            # OpenAI sends null beside tool calls; templates concatenate or test `in` on it.
            out["content"] = ""
        elif isinstance(content, list):
            out["content"] = _text_parts(content) if encoding.keep_parts else content_text(content)
        if out.get("tool_calls"):
            out["tool_calls"] = [
                _tool_call(call, encoding.dict_arguments) for call in out["tool_calls"]
            ]
        reasoning = out.get("reasoning_content")
        if alias_reasoning and reasoning is not None:
            for alias in REASONING_ALIASES:
                out.setdefault(alias, reasoning)
        encoded.append(out)
    return _merge_system(encoded) if encoding.merge_system else encoded


def encodings(messages: Sequence[Message]) -> Iterator[Encoding]:
    """The encodings worth trying for these messages, most faithful first."""
    has_parts = any(isinstance(m.get("content"), list) for m in messages)
    has_calls = any(m.get("tool_calls") for m in messages)
    has_system = bool(messages) and messages[0].get("role") == "system"
    for merge_system in (False, True) if has_system else (False,):
        for keep_parts in (True, False) if has_parts else (False,):
            for dict_arguments in (True, False) if has_calls else (True,):
                yield Encoding(keep_parts, dict_arguments, merge_system)


def _dumps(value: Any) -> tuple[str, ...]:
    # How a template might print a structure it did not expect: Python repr or JSON.
    return (
        repr(value),
        json.dumps(value, ensure_ascii=False),
        json.dumps(value, ensure_ascii=False, separators=(",", ":")),
    )


def misrendered(rendered: str, encoded: Sequence[Message]) -> bool:
    """Whether the template printed a Python repr of our structures or dropped a text part.

    Such output renders without error yet is garbage, so it should send us to the next encoding.
    """
    for message in encoded:
        content = message.get("content")
        if isinstance(content, list):
            for part in content:
                text = part.get("text", "").strip()
                if text not in rendered or any(dump in rendered for dump in _dumps(part)):
                    return True
        for call in message.get("tool_calls") or ():
            function = call.get("function", call) if isinstance(call, Mapping) else {}
            arguments = function.get("arguments") if isinstance(function, Mapping) else None
            if isinstance(arguments, dict) and arguments and repr(arguments) in rendered:
                return True
    return False
