"""Rendering one task's prompt text with the model's `systemone` template.

The template gets the spec's globals (5.6): `id`, `type`, `instructions`, `state`, `options`
(`key`, `description`, `label`), `images` (one media marker each) and, per type, d1-omni's
separators and nimble's `questions`. What the template sees is prepared per type: lev sorts
object keys (it was trained that way; everything else keeps the request's order), kev flattens
the state to YAML-like text, kev and d1-omni escape special tokens written in user text, and
media markers are taken out of user text so only real media reach mtmd.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jinja2

from llamactl.core.errors import InvalidRequestError, ModelLoadError
from llamactl.engine.chat.environment import TemplateRaisedError, compile_template

from .labels import Labels
from .registry import DecisionType
from .types import Option, Question

SPECIAL = re.compile(r"<\|([^<>|]*)\|>")
OMNI_SEP = "<<d1omni:sep>>"
OMNI_MARKS = {
    "mark_state": "<<d1omni:state>>",
    "mark_question": "<<d1omni:question>>",
    "mark_option": "<<d1omni:option>>",
}


def escape_special(text: str) -> str:
    """`<|name|>` written by a user becomes `<¦name¦>`, so it cannot become a control token."""
    return SPECIAL.sub("<\u00a6\\1\u00a6>", text)


@dataclass(frozen=True)
class TextPrep:
    """How user strings are cleaned for one model type."""

    dtype: DecisionType
    media_marker: str

    def text(self, s: str) -> str:
        if self.media_marker:  # a blank where the marker was, as llama-server writes it
            s = s.replace(self.media_marker, " ")
        if self.dtype.escape_special:
            s = escape_special(s)
        if self.dtype.name == "lfm2-d1-omni":
            s = s.replace("<<d1omni:", "<<d1omni ")
        return s

    def value(self, v: Any) -> Any:
        """Strings cleaned; object keys too (d1-omni escapes keys); lev sorts keys."""
        if isinstance(v, str):
            return self.text(v)
        if isinstance(v, list):
            return [self.value(x) for x in v]
        if isinstance(v, dict):
            items = [(self.text(str(k)), self.value(x)) for k, x in v.items()]
            if self.dtype.sort_keys:
                items.sort(key=lambda kv: kv[0])
            return dict(items)
        return v

    def user(self, v: Any) -> Any:
        """A state, instructions or description as the template receives it."""
        if self.dtype.flatten_text:
            return self.text(flatten(v))
        return self.value(v)


def flatten(value: Any, indent: int = 0) -> str:
    """kev's YAML-like text (kev/api.py's render, as llama-server's `decision_kev_render`
    writes it): `key: value` lines, a nested object or list under `key:` indented by 2, list
    items after `- ` with an item's own first line inline (`- id: 2`), booleans as True /
    False, null as nothing (`key: `), numbers as JSON."""
    pad = "  " * indent
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, list):
        items = (flatten(item, indent + 1).lstrip(" \t\n\r") for item in value)
        return "\n".join(f"{pad}- {text}" for text in items)
    if isinstance(value, dict):
        lines = []
        for key, item in value.items():
            nested = isinstance(item, (dict, list))
            head = f"{pad}{key}:\n" if nested else f"{pad}{key}: "
            lines.append(head + flatten(item, indent + 1 if nested else 0))
        return "\n".join(lines)
    return json.dumps(value)


class PromptRenderer:
    """The compiled `systemone` template of one model, with its per-type preparation."""

    def __init__(
        self,
        source: str,
        dtype: DecisionType,
        *,
        media_marker: str = "",
        bos_token: str = "",
        eos_token: str = "",
    ) -> None:
        try:
            self._template = compile_template(source)
        except jinja2.TemplateSyntaxError as exc:
            raise ModelLoadError(
                f'the "systemone" template has a syntax error on line {exc.lineno}: {exc.message}'
            ) from exc
        self.source = source
        self.dtype = dtype
        self.prep = TextPrep(dtype, "")
        # with media, markers in user text are taken out so only real media reach mtmd;
        # without, the text is left as it is (a marker is plain text then), as in llama-server
        self.prep_media = TextPrep(dtype, media_marker)
        self.media_marker = media_marker
        self._tokens = {"bos_token": bos_token, "eos_token": eos_token}
        # a template that never mentions `images` has no place to put them
        self.takes_images = dtype.takes_images and re.search(r"\bimages\b", source) is not None

    def render(
        self,
        question: Question,
        options: Sequence[Option],
        labels: Labels,
        state: Any,
        n_media: int,
        *,
        audio: bool = False,
        all_questions: Sequence[Question] = (),
    ) -> str:
        prep = self.prep_media if n_media else self.prep
        variables: dict[str, Any] = {
            **self._tokens,
            "id": prep.text(question.id),
            "type": question.type,
            "instructions": prep.user(question.instructions),
            "state": prep.user(state),
            "options": [
                {
                    "key": prep.text(o.key),
                    "description": prep.user(o.description) if o.description is not None else None,
                    "label": code,
                }
                for o, code in zip(options, labels.codes, strict=True)
            ],
            "images": [self.media_marker] * n_media,
        }
        if self.dtype.name == "lfm2-d1-omni":
            variables |= {"audio": audio, "sep": OMNI_SEP, **OMNI_MARKS}
        if self.dtype.name == "nimble":
            variables["questions"] = [
                {
                    "id": q.id,
                    "type": q.type,
                    "instructions": prep.user(q.instructions),
                    "options": [{"key": o.key, "description": o.description} for o in q.options],
                }
                for q in all_questions
            ]
        try:
            return self._template.render(**variables)
        except TemplateRaisedError as exc:
            raise InvalidRequestError(
                f'the "systemone" template refused the request: {exc}'
            ) from exc
        except Exception as exc:  # a template error is the model file's, not the caller's
            raise ModelLoadError(
                f'the "systemone" template failed: {type(exc).__name__}: {exc}'
            ) from exc
