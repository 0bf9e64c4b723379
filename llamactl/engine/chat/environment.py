"""The Jinja sandbox chat templates run in.

Model authors write their templates against Hugging Face's renderer, so we give them the same
extras it does (``raise_exception``, ``strftime_now``, a keyword-rich ``tojson``, loop controls,
the ``{% generation %}`` tag, mutable lists); without them a third of real templates fail.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from functools import lru_cache
from typing import Any, NoReturn

from jinja2 import Template, nodes
from jinja2.ext import Extension
from jinja2.parser import Parser
from jinja2.sandbox import SandboxedEnvironment


class TemplateRaisedError(Exception):
    """A template called ``raise_exception``; its message is the template author's words."""


class GenerationTagExtension(Extension):
    """`{% generation %}...{% endgeneration %}` marks spans for training; it renders its body."""

    tags = {"generation"}

    def parse(self, parser: Parser) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        # An always-true `if` renders the body unchanged and keeps scoping identical.
        return nodes.If(nodes.Const(True), body, [], [], lineno=lineno)


def _raise_exception(message: str) -> NoReturn:
    raise TemplateRaisedError(message)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _json_default(value: Any) -> Any:
    # Filters such as `map` yield generators; serialise them as the lists they stand for.
    if isinstance(value, Iterable) and not isinstance(value, (str, bytes, Mapping)):
        return list(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # Jinja's own tojson HTML-escapes and takes only `indent`; templates expect plain json.dumps.
    return json.dumps(
        value,
        ensure_ascii=ensure_ascii,
        indent=indent,
        separators=separators,
        sort_keys=sort_keys,
        default=_json_default,
    )


@lru_cache(maxsize=1)
def chat_environment() -> SandboxedEnvironment:
    """One shared sandbox; mutable (not Immutable) because templates `.append` to lists."""
    env = SandboxedEnvironment(
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
        extensions=["jinja2.ext.loopcontrols", GenerationTagExtension],
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


@lru_cache(maxsize=64)
def compile_template(source: str) -> Template:
    """Compile once per distinct source; models share templates, so key on the text itself."""
    return chat_environment().from_string(source)
