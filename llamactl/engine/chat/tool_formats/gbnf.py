"""Building GBNF grammars (llama.cpp's grammar syntax) out of literals, schemas and rules.

JSON-schema rules come from llama-cpp-python's converter, which always names its top rule
`root`; each schema's rules get a unique prefix so any number of them fit in one grammar.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

# A rule body's tokens: literals and character classes are kept, names get the prefix.
_BODY_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]|\{[^}]*\}|[A-Za-z0-9-]+|.', re.S)
_LITERAL_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def literal(text: str) -> str:
    """A GBNF string literal matching exactly `text`."""
    return '"' + "".join(_LITERAL_ESCAPES.get(ch, ch) for ch in text) + '"'


def _class_char(ch: str) -> str:
    if ch.isalnum() and ch.isascii():
        return ch
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02X}"
    return f"\\u{code:04X}" if code < 0x10000 else f"\\U{code:08X}"


def char_class(chars: Sequence[str], *, negate: bool = False) -> str:
    return "[" + ("^" if negate else "") + "".join(_class_char(ch) for ch in chars) + "]"


def _matcher_step(stops: Sequence[str], states: dict[str, int], seen: str) -> int | None:
    """The state after the text so far ends with `seen`: the longest tail that begins a stop,
    or None when `seen` ends with a whole stop."""
    if any(seen.endswith(stop) for stop in stops):
        return None
    for size in range(len(seen), 0, -1):
        if seen[-size:] in states:
            return states[seen[-size:]]
    return 0


class GrammarBuilder:
    """Collects named rules; `render(root_body)` gives the finished grammar."""

    def __init__(self) -> None:
        self._rules: dict[str, str] = {}
        self._schemas = 0
        self._excluding: dict[tuple[str, ...], str] = {}

    def rule(self, name: str, body: str) -> str:
        """Add `name ::= body` (a numbered name when taken); returns the name used."""
        name = re.sub(r"[^A-Za-z0-9-]+", "-", name).strip("-") or "r"
        unique, n = name, 1
        while unique in self._rules or unique == "root":
            n += 1
            unique = f"{name}-{n}"
        self._rules[unique] = body
        return unique

    def schema(self, schema: Mapping[str, Any], *, canonical: bool = False) -> str:
        """A rule matching the JSON values valid for `schema`.

        `canonical`: spaced exactly as `json.dumps` spaces it (", " and ": ", nowhere else),
        so a value read back into the history renders to the very text the model wrote and
        the prompt cache keeps its tokens."""
        # here: parsing tool calls must not load llama.cpp
        from llamactl.engine.grammar import schema_to_gbnf

        text = schema_to_gbnf(loosen(schema), "JSON schema in tools")
        self._schemas += 1
        prefix = f"s{self._schemas}-"
        for line in text.splitlines():
            if " ::= " not in line:
                continue
            name, body = line.split(" ::= ", 1)
            name = name.strip()
            if canonical:
                body = '""' if name == "space" else _CANONICAL_SEPARATOR.sub(r'"\1 "', body)
            self._rules[prefix + name] = _prefix_names(body, prefix)
        return prefix + "root"

    def excluding(self, *stops: str) -> str:
        """A rule matching any text that contains none of `stops` (free-text values).

        One rule per state of a matcher for the stops (which beginning of a stop the text
        ends with); completing a stop has no transition, so none can ever appear.
        """
        if stops in self._excluding:
            return self._excluding[stops]
        prefixes = sorted({stop[:k] for stop in stops for k in range(len(stop))}, key=len)
        states = {prefix: i for i, prefix in enumerate(prefixes)}
        base = f"not-{len(self._excluding) + 1}"
        alphabet = sorted(set("".join(stops)))
        for prefix, state in states.items():
            steps = {ch: _matcher_step(stops, states, prefix + ch) for ch in alphabet}
            special = [ch for ch, target in steps.items() if target != 0]
            options = [f"{char_class(special, negate=True)} {base}-0"]
            for target in sorted({t for t in steps.values() if t}):
                chars = [ch for ch, t in steps.items() if t == target]
                options.append(f"{char_class(chars)} {base}-{target}")
            self._rules[f"{base}-{state}"] = "( " + " | ".join(options) + " )?"
        self._excluding[stops] = f"{base}-0"
        return f"{base}-0"

    def render(self, root: str) -> str:
        lines = [f"root ::= {root}"]
        lines += [f"{name} ::= {body}" for name, body in self._rules.items()]
        return "\n".join(lines) + "\n"


# llama.cpp's schema converter writes a separator as the literal then its `space` rule
_CANONICAL_SEPARATOR = re.compile(r'(?<!\\)"([:,])" space(?![\w-])')

_TYPING_KEYS = {
    "$ref", "type", "const", "enum", "anyOf", "oneOf", "allOf",
    "properties", "additionalProperties", "items", "prefixItems", "pattern",
}  # fmt: skip
ANY_TYPE = ["string", "number", "integer", "boolean", "null", "object", "array"]


def untyped(schema: Any) -> bool:
    """A schema that says nothing about its values (e.g. only a description): anything goes."""
    return isinstance(schema, Mapping) and not _TYPING_KEYS & set(schema)


def loosen(schema: Any) -> Any:
    """`schema` with every untyped part made explicitly "any type": the converter would read
    {} as an object and reject a description-only schema, both common in tool definitions."""
    if isinstance(schema, list):
        return [loosen(item) for item in schema]
    if not isinstance(schema, Mapping):
        return schema
    if untyped(schema):
        return {**schema, "type": ANY_TYPE}
    out = dict(schema)
    for key in ("items", "prefixItems", "anyOf", "oneOf", "allOf"):
        if key in out:
            out[key] = loosen(out[key])
    if isinstance(out.get("additionalProperties"), Mapping):
        out["additionalProperties"] = loosen(out["additionalProperties"])
    for key in ("properties", "$defs", "definitions"):
        if isinstance(out.get(key), Mapping):
            out[key] = {name: loosen(sub) for name, sub in out[key].items()}
    return out


def _prefix_names(body: str, prefix: str) -> str:
    out = []
    for token in _BODY_TOKEN.findall(body):
        if token[0] not in '"[{' and re.fullmatch(r"[A-Za-z0-9-]+", token):
            token = prefix + token
        out.append(token)
    return "".join(out)


def alternatives(options: Sequence[str]) -> str:
    return options[0] if len(options) == 1 else "( " + " | ".join(options) + " )"


def repeated(item: str, separator: str, many: bool) -> str:
    """`item`, or one or more of it separated by `separator` (a GBNF expression)."""
    if not many:
        return item
    return f"{item} ( {separator} {item} )*" if separator else f"( {item} )+"


def sequence(items: Sequence[tuple[str, bool]], separator: str = "") -> str:
    """Items in order, the optional ones (flag False) may be left out; with a `separator`
    between whichever are present."""
    if not items:
        return '""'
    if not separator:
        return " ".join(body if required else f"( {body} )?" for body, required in items)
    # Required items first, so every optional one can carry its own leading separator.
    ordered = [i for i in items if i[1]] + [i for i in items if not i[1]]
    if ordered[0][1]:
        parts = [ordered[0][0]]
        for body, required in ordered[1:]:
            parts.append(f"{separator} {body}" if required else f"( {separator} {body} )?")
        return " ".join(parts)
    # All optional: choose the first one present, then any of those after it.
    bodies = [body for body, _ in ordered]
    options = []
    for first in range(len(bodies)):
        tail = " ".join(f"( {separator} {b} )?" for b in bodies[first + 1 :])
        options.append(f"{bodies[first]} {tail}".strip())
    return "( " + " | ".join(options) + " )?"
