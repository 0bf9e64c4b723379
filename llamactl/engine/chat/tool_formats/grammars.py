"""GBNF for each family: output that is nothing but tool calls, arguments per the schemas.

Used for tool_choice "required" or a named function. The calls are written exactly the way
the family's chat template renders them, which is also how the model was trained to write them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from llamactl.engine.chat.tool_formats.base import ToolSpec
from llamactl.engine.chat.tool_formats.gbnf import (
    GrammarBuilder,
    alternatives,
    literal,
    repeated,
    sequence,
    untyped,
)
from llamactl.engine.chat.tool_formats.values import schema_types

CallBuilder = Callable[[GrammarBuilder, ToolSpec], str]
ANY_OBJECT: Mapping[str, Any] = {"type": "object"}


def parameters_schema(tool: ToolSpec) -> Mapping[str, Any]:
    """The tool's arguments schema; arguments are always an object."""
    schema = tool.parameters
    return schema if schema and not untyped(schema) else {**schema, **ANY_OBJECT}


def one_call(g: GrammarBuilder, tools: Sequence[ToolSpec], build: CallBuilder) -> str:
    """A rule matching one call of any of `tools`."""
    options = [g.rule(f"call-{tool.name}", build(g, tool)) for tool in tools]
    return g.rule("call", alternatives(options))


def calls(
    g: GrammarBuilder,
    tools: Sequence[ToolSpec],
    parallel: bool,
    build: CallBuilder,
    *,
    separator: str = "",
    before: str = "",
    after: str = "",
) -> str:
    """`before`, one call (or several, `separator` between them), `after`."""
    body = repeated(one_call(g, tools, build), literal(separator) if separator else "", parallel)
    parts = [literal(before)] if before else []
    parts.append(body)
    if after:
        parts.append(literal(after))
    return " ".join(parts)


def json_object_call(
    name_key: str = "name", args_key: str = "arguments", *, canonical: bool = False
) -> CallBuilder:
    """{"name": "f", "arguments": {...}} with the arguments per the tool's schema
    (`canonical`: spaced as json.dumps spaces them)."""

    def build(g: GrammarBuilder, tool: ToolSpec) -> str:
        head = "{" + f"{json.dumps(name_key)}: {json.dumps(tool.name)}, {json.dumps(args_key)}: "
        arguments = g.schema(parameters_schema(tool), canonical=canonical)
        return f"{literal(head)} {arguments} {literal('}')}"

    return build


def named_json_call(before_name: str, after_name: str, end: str = "") -> CallBuilder:
    """before_name + name + after_name + {arguments} + end (DeepSeek, Kimi, Mistral v11...)."""

    def build(g: GrammarBuilder, tool: ToolSpec) -> str:
        parts = [literal(before_name + tool.name + after_name), g.schema(parameters_schema(tool))]
        if end:
            parts.append(literal(end))
        return " ".join(parts)

    return build


# XML-style formats: each parameter is a tagged block; string values are bare text.

# (key rule, value rule, value schema) -> one parameter block.
ParamBuilder = Callable[[str, str, Mapping[str, Any]], str]
FREE_KEY = "[A-Za-z0-9_.-]+"


def xml_call(
    head: Callable[[str], str], param: ParamBuilder, stops: tuple[str, ...], tail: str
) -> CallBuilder:
    """head(name), the parameters (in schema order, the required ones mandatory), tail.

    `stops` are the texts the reader takes as the end of a value, which string values may
    therefore not contain.
    """

    def build(g: GrammarBuilder, tool: ToolSpec) -> str:
        parameters = parameters_schema(tool)
        properties = parameters.get("properties")
        if isinstance(properties, Mapping) and properties:
            required = set(parameters.get("required") or ())
            items = [
                (param(literal(key), value_rule(g, schema, stops), schema), key in required)
                for key, schema in properties.items()
            ]
            body = sequence(items)
        elif isinstance(properties, Mapping) or parameters.get("additionalProperties") is False:
            body = ""  # takes no arguments
        else:  # a free-form object: any keys, text values
            body = f"( {param(FREE_KEY, g.excluding(*stops), {'type': 'string'})} )*"
        return " ".join(p for p in (literal(head(tool.name)), body, literal(tail)) if p)

    return build


def value_rule(g: GrammarBuilder, schema: Mapping[str, Any], stops: tuple[str, ...]) -> str:
    """A string is written bare (without any of `stops`); anything else as JSON. A value of
    unknown type is bare text too: the reader decodes it when it is JSON."""
    if untyped(schema):
        return g.excluding(*stops)
    if schema_types(schema) == {"string"}:
        options = schema.get("enum") or ([schema["const"]] if "const" in schema else None)
        if options and all(isinstance(o, str) for o in options):
            return alternatives([literal(o) for o in options])
        return g.excluding(*stops)
    return g.schema(schema)


def key_param(open_key: str, close_key: str, close_value: str) -> ParamBuilder:
    """open_key key close_key value close_value (Qwen3-Coder, GLM, MiniMax)."""

    def build(key: str, value: str, schema: Mapping[str, Any]) -> str:
        return f"{literal(open_key)} {key} {literal(close_key)} {value} {literal(close_value)}"

    return build


def dsml_param(ns: str) -> ParamBuilder:
    """DeepSeek V3.2/V4 mark each value string="true" (bare text) or "false" (JSON)."""

    def build(key: str, value: str, schema: Mapping[str, Any]) -> str:
        flag = "true" if schema_types(schema) == {"string"} else "false"
        return key_param(f'<{ns}parameter name="', f'" string="{flag}">', f"</{ns}parameter>\n")(
            key, value, schema
        )

    return build


def pythonic_call(g: GrammarBuilder, tool: ToolSpec) -> str:
    """name(key=value, ...) with JSON-spelled values (LFM2 reads true/false/null too)."""
    parameters = parameters_schema(tool)
    properties = parameters.get("properties")
    if isinstance(properties, Mapping):
        required = set(parameters.get("required") or ())
        items = [
            (f"{literal(key + '=')} {g.schema(schema)}", key in required)
            for key, schema in properties.items()
        ]
        arguments = sequence(items, literal(", "))
    else:
        pair = f'{FREE_KEY} "=" {g.schema({})}'
        arguments = f"( {pair} ( {literal(', ')} {pair} )* )?"
    return f"{literal(tool.name + '(')} {arguments} {literal(')')}"
