"""Size limits on what one request may ask for, shared by every API family.

Each limit bounds work that grows with the request: messages are rendered by the chat template
and tokenised, stop strings are matched after every generated token on the decode thread, tool
and response schemas are compiled to grammars. A request over a limit is refused with a 400
that names the field, the limit and the setting that raises it (docs/serve.md, Limits).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from llamactl.config import Settings

from .errors import APIError

__all__ = ["RequestLimits", "limits_of", "over_limit"]


@dataclass(frozen=True)
class RequestLimits:
    messages: int
    stop_strings: int
    stop_length: int
    tools: int
    schema_bytes: int
    schema_depth: int
    grammar_bytes: int
    json_values: int
    tokenize_bytes: int

    @classmethod
    def from_settings(cls, settings: Settings) -> RequestLimits:
        return cls(
            messages=settings.max_messages,
            stop_strings=settings.max_stop_strings,
            stop_length=settings.max_stop_length,
            tools=settings.max_tools,
            schema_bytes=settings.max_schema_bytes,
            schema_depth=settings.max_schema_depth,
            grammar_bytes=settings.max_schema_bytes,
            json_values=settings.max_json_values,
            tokenize_bytes=settings.max_tokenize_bytes,
        )

    def check_messages(self, count: int, field: str = "messages") -> None:
        if count > self.messages:
            raise over_limit(field, f"{count} messages", self.messages, "max_messages")

    def check_stops(self, stops: Sequence[str], field: str = "stop") -> None:
        if len(stops) > self.stop_strings:
            raise over_limit(
                field, f"{len(stops)} stop strings", self.stop_strings, "max_stop_strings"
            )
        for i, stop in enumerate(stops):
            if len(stop) > self.stop_length:
                raise over_limit(
                    f"{field}.{i}", f"{len(stop)} characters", self.stop_length, "max_stop_length"
                )

    def check_tools(self, count: int, field: str = "tools") -> None:
        if count > self.tools:
            raise over_limit(field, f"{count} tools", self.tools, "max_tools")

    def check_schema(self, schema: Any, field: str) -> None:
        """A JSON schema's encoded size and nesting depth (objects and arrays)."""
        if schema is None:
            return
        size = len(json.dumps(schema, ensure_ascii=False).encode())
        if size > self.schema_bytes:
            raise over_limit(field, f"{size} bytes", self.schema_bytes, "max_schema_bytes")
        depth = nesting_depth(schema)
        if depth > self.schema_depth:
            raise over_limit(field, f"nested {depth} deep", self.schema_depth, "max_schema_depth")

    def check_logit_bias(self, entries: int, n_vocab: int) -> None:
        """One bias per token at most: more entries than the vocabulary cannot be right."""
        if entries > n_vocab:
            raise APIError(
                400,
                f"Field 'logit_bias': {entries} entries, but the vocabulary has {n_vocab} tokens",
            )

    def check_json_values(self, body: Any) -> None:
        """The number of JSON values in a body: what parsing it costs."""
        count = 0
        stack = [body]
        while stack:
            item = stack.pop()
            count += 1
            if count > self.json_values:
                raise APIError(
                    413,
                    f"the request body holds more than {self.json_values} JSON values "
                    "(--max-json-values or LLAMACTL_MAX_JSON_VALUES raises it)",
                )
            if isinstance(item, dict):
                stack.extend(item.values())
            elif isinstance(item, list):
                stack.extend(item)

    def check_tokenize(self, size: int, field: str = "content") -> None:
        """The text `/tokenize` takes, in UTF-8 bytes: its answer (and the memory it needs)
        grows with it, up to a token per byte."""
        if size > self.tokenize_bytes:
            raise over_limit(field, f"{size} bytes", self.tokenize_bytes, "max_tokenize_bytes")

    def check_grammar(self, grammar: str | None, field: str = "grammar") -> None:
        if grammar is not None and len(grammar.encode()) > self.grammar_bytes:
            size = len(grammar.encode())
            raise over_limit(field, f"{size} bytes", self.grammar_bytes, "max_schema_bytes")


def nesting_depth(value: Any) -> int:
    """Depth of nested objects and arrays, without recursion (a hostile schema can be deep)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children)
    return deepest


def over_limit(field: str, got: str, limit: int, setting: str) -> APIError:
    """The one wording of a 400 for a request over a limit: the field, what it holds, the
    limit and the setting that raises it."""
    return APIError(
        400,
        f"Field '{field}': {got} is over this server's limit of {limit} "
        f"(--{setting.replace('_', '-')} or LLAMACTL_{setting.upper()} raises it)",
    )


def limits_of(settings: Settings) -> RequestLimits:
    """The limits in force; rebuilt per call (cheap) so tests may change settings."""
    return RequestLimits.from_settings(settings)
