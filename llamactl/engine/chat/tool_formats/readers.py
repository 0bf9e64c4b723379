"""Readers: each reads one call (or one batch of calls) of a family at a cursor.

They are written like ordinary recursive-descent parsers; the cursor turns "ran out of text"
into NeedMore while streaming, so the same code serves partial and complete output.
"""

from __future__ import annotations

import ast
import re
import warnings
from typing import Any

from llamactl.engine.chat.tool_formats.base import ParsedCall, Reader, Schemas
from llamactl.engine.chat.tool_formats.cursor import Cursor, NotACall
from llamactl.engine.chat.tool_formats.values import (
    arguments_object,
    convert_value,
    json_call,
    json_calls,
    property_schema,
)

NAME = re.compile(r"[\w.\-:/@]+")
_KEY = re.compile(r"[^<>\n]+")
_CALL_ID = re.compile(r"[\w\-]+")
_KIMI_INDEX = re.compile(r":\d+$")
_HEADER_LIMIT = 256  # how far a format's header may run before its terminator


def _trim_newline(raw: str) -> str:
    """Qwen3-Coder puts each value on its own lines; the newlines are not part of it."""
    if raw.startswith("\n"):
        raw = raw[1:]
    return raw[:-1] if raw.endswith("\n") else raw


def read_parameters(c: Cursor, schema: Any, end_tag: str) -> dict[str, Any]:
    """<parameter=k>v</parameter>... up to `end_tag` (Qwen3-Coder, Seed-OSS)."""
    args: dict[str, Any] = {}
    while True:
        c.skip()
        if not c.optional("<parameter="):
            break
        key = c.pattern(_KEY).strip()
        c.expect(">")
        raw, stop = c.until("</parameter>", "<parameter=", end_tag)
        if stop != "</parameter>":  # a missing close tag: the next tag ends the value
            c.pos -= len(stop)
        args[key] = convert_value(_trim_newline(raw), property_schema(schema, key))
    c.closing(end_tag)
    return args


def read_function(c: Cursor, schemas: Schemas) -> ParsedCall:
    """<function=name> with XML parameters (Qwen3-Coder) or a JSON object (functionary)."""
    c.expect("<function=")
    name = c.pattern(NAME)
    c.expect(">")
    c.skip()
    if c.startswith("{"):
        args = arguments_object(c.json())
        c.closing("</function>")
    else:
        args = read_parameters(c, schemas.get(name), "</function>")
    return ParsedCall(name, args)


def _read_glm(c: Cursor, schemas: Schemas) -> ParsedCall:
    """name<arg_key>k</arg_key><arg_value>v</arg_value>... (GLM 4.5+, Ling, Laguna)."""
    name = c.pattern(NAME)
    schema = schemas.get(name)
    args: dict[str, Any] = {}
    while True:
        c.skip()
        if not c.optional("<arg_key>"):
            break
        key = c.until("</arg_key>", limit=_HEADER_LIMIT)[0].strip()
        c.skip()
        c.expect("<arg_value>")
        raw = c.until("</arg_value>")[0]
        args[key] = convert_value(raw, property_schema(schema, key))
    return ParsedCall(name, args)


def tagged(open_tag: str, close_tag: str) -> Reader:
    """<tool_call>...</tool_call> holding JSON (Hermes), <function=...> (Qwen3-Coder) or
    GLM's name-and-arg-keys; a bare <function=...> is read too."""

    def read(c: Cursor, schemas: Schemas) -> list[ParsedCall]:
        if c.startswith("<function="):
            return [read_function(c, schemas)]
        c.expect(open_tag)
        c.skip()
        if c.startswith("<function="):
            calls = [read_function(c, schemas)]
        elif c.which(("{", "[")):
            calls = json_calls(c.json())
        else:
            calls = [_read_glm(c, schemas)]
        c.closing(close_tag)
        return calls

    return read


def read_llama(c: Cursor, schemas: Schemas) -> list[ParsedCall]:
    """{"name": ..., "parameters": ...}, optionally after <|python_tag|> (Llama 3.x)."""
    c.optional("<|python_tag|>")
    c.skip()
    start = c.pos
    c.expect("{")
    c.skip()
    # Decide early that a JSON answer is not a call, so it streams instead of waiting.
    if c.which(('"name"', '"type"', '"function"')) is None:
        raise NotACall
    c.pos = start
    return [json_call(c.json(), require_args=True)]


def read_mistral(c: Cursor, schemas: Schemas) -> list[ParsedCall]:
    """[TOOL_CALLS] then a JSON list (Nemo) or name[CALL_ID]id[ARGS]{...} (v11+ tokenizers)."""
    c.expect("[TOOL_CALLS]")
    c.skip()
    if c.which(("[", "{")):
        return json_calls(c.json())
    name = c.pattern(NAME)
    if c.optional("[CALL_ID]"):
        c.pattern(_CALL_ID)
    c.expect("[ARGS]")
    return [ParsedCall(name, arguments_object(c.json()))]


def json_block(open_tag: str, close_tag: str | None = None, **keys: Any) -> Reader:
    """A marker, a JSON list of calls (or objects one per line) and an optional close tag."""

    def read(c: Cursor, schemas: Schemas) -> list[ParsedCall]:
        c.expect(open_tag)
        c.skip()
        calls = json_calls(c.json(), **keys)
        if close_tag is None:
            return calls
        while True:
            c.skip(",\n\t\r ")
            if not c.startswith("{"):
                break
            calls += json_calls(c.json(), **keys)
        c.closing(close_tag)
        return calls

    return read


def deepseek(begin: str, sep: str, end: str) -> Reader:
    """name<sep>{...} (V3.1) or function<sep>name ```json {...}``` (R1 and its distills)."""

    def read(c: Cursor, schemas: Schemas) -> list[ParsedCall]:
        c.expect(begin)
        name = c.pattern(NAME)
        c.expect(sep)
        c.skip()
        if not c.startswith("{"):
            name = c.pattern(NAME)
            c.skip()
            c.optional("```json")
        args = arguments_object(c.json())
        c.skip()
        c.optional("```")
        c.closing(end)
        return [ParsedCall(name, args)]

    return read


def read_kimi(c: Cursor, schemas: Schemas) -> list[ParsedCall]:
    """<|tool_call_begin|>functions.name:0<|tool_call_argument_begin|>{...}<|tool_call_end|>."""
    c.expect("<|tool_call_begin|>")
    c.skip()
    ident = c.pattern(NAME)
    c.skip()
    c.expect("<|tool_call_argument_begin|>")
    args = arguments_object(c.json())
    c.closing("<|tool_call_end|>")
    name = _KIMI_INDEX.sub("", ident).removeprefix("functions.")
    if not name:
        raise NotACall
    return [ParsedCall(name, args)]


def read_solar(c: Cursor, schemas: Schemas) -> list[ParsedCall]:
    """<|tool_call:begin|>id<|tool_call:name|>name<|tool_call:args|>{...}<|tool_call:end|>."""
    c.expect("<|tool_call:begin|>")
    if not c.startswith("<|tool_call:name|>"):
        c.pattern(_CALL_ID)
    c.expect("<|tool_call:name|>")
    name = c.pattern(NAME)
    c.expect("<|tool_call:args|>")
    args = arguments_object(c.json())
    c.closing("<|tool_call:end|>")
    return [ParsedCall(name, args)]


_GPT_OSS_RECIPIENT = re.compile(r"\bto=functions\.([\w.\-]+)")


def read_gpt_oss(c: Cursor, schemas: Schemas) -> list[ParsedCall]:
    """A commentary message addressed to=functions.name whose body is the JSON arguments."""
    header, _ = c.until("<|message|>", limit=_HEADER_LIMIT)
    found = _GPT_OSS_RECIPIENT.search(header)
    if found is None or "<|channel|>" not in header or "<|end|>" in header:
        raise NotACall
    return [ParsedCall(found.group(1), arguments_object(c.json()))]


def invoke(ns: str) -> Reader:
    """<invoke name="f"><parameter name="p">v</parameter></invoke> (MiniMax M2; DeepSeek
    V3.2/V4 with the "｜DSML｜" prefix and a string="true|false" attribute)."""

    def read(c: Cursor, schemas: Schemas) -> list[ParsedCall]:
        c.expect(f"<{ns}invoke")
        c.skip()
        c.expect('name="')
        name = c.pattern(NAME)
        c.expect('"')
        c.skip()
        c.expect(">")
        schema = schemas.get(name)
        args: dict[str, Any] = {}
        while True:
            c.skip()
            if not c.optional(f"<{ns}parameter"):
                break
            c.skip()
            c.expect('name="')
            key = c.until('"', limit=_HEADER_LIMIT)[0]
            attributes = c.until(">", limit=_HEADER_LIMIT)[0]
            raw = c.until(f"</{ns}parameter>")[0]
            if 'string="true"' in attributes:
                args[key] = raw
            else:
                declared = None if 'string="false"' in attributes else property_schema(schema, key)
                args[key] = convert_value(raw, declared)
        c.closing(f"</{ns}invoke>")
        return [ParsedCall(name, args)]

    return read


def read_pythonic(c: Cursor, schemas: Schemas) -> list[ParsedCall]:
    """<|tool_call_start|>[f(a=1), g(b="x")]<|tool_call_end|> (LFM2)."""
    c.expect("<|tool_call_start|>")
    body = c.until("<|tool_call_end|>")[0]
    try:
        with warnings.catch_warnings():  # a "\\," in model text is its problem, not a warning
            warnings.simplefilter("ignore")
            tree = ast.parse(body.strip(), mode="eval").body
    except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
        raise NotACall from exc
    nodes = tree.elts if isinstance(tree, ast.List) else [tree]
    if not nodes:
        raise NotACall
    return [_python_call(node) for node in nodes]


def _python_call(node: ast.expr) -> ParsedCall:
    if not isinstance(node, ast.Call) or node.args:
        raise NotACall
    name = _dotted(node.func)
    args = {}
    for keyword in node.keywords:
        if keyword.arg is None:
            raise NotACall
        args[keyword.arg] = _literal(keyword.value)
    return ParsedCall(name, args)


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    raise NotACall


_WORDS = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None}


def _literal(node: ast.expr) -> Any:
    """A Python literal, also accepting JSON's true/false/null spellings."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, int, float, type(None))):
        return node.value
    if isinstance(node, ast.Name) and node.id in _WORDS:
        return _WORDS[node.id]
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_literal(item) for item in node.elts]
    if isinstance(node, ast.Dict):
        keys = [_literal(k) if k is not None else None for k in node.keys]
        if not all(isinstance(k, str) for k in keys):
            raise NotACall
        return {k: _literal(v) for k, v in zip(keys, node.values, strict=True)}
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _literal(node.operand)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return -value if isinstance(node.op, ast.USub) else value
    raise NotACall
