"""llama.cpp's built-in chat formats (`--chat-template llama2`, `gemma`, `mistral-v7`, ...):
the prompt is written by `llama_chat_apply_template`, as llama-server writes it.

These are the formats llama.cpp writes in C++ rather than Jinja; a name from its list chooses
one. They know roles and text only: no tools, no template variables (llama.cpp's own legacy
route has the same limits), and text parts are joined by a newline as llama.cpp joins them.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Mapping, Sequence
from typing import Any

import llama_cpp

from llamactl.core.errors import TemplateError

from .markers import ThinkingMarkers
from .messages import Message, part_texts
from .template import render_turns

__all__ = ["BuiltinTemplate", "builtin_template_names"]


@functools.cache
def builtin_template_names() -> frozenset[str]:
    """The names llama.cpp's `llama_chat_builtin_templates` lists."""
    count = llama_cpp.llama_chat_builtin_templates((ctypes.c_char_p * 0)(), 0)
    names = (ctypes.c_char_p * count)()
    llama_cpp.llama_chat_builtin_templates(names, count)
    return frozenset(n.decode() for n in names if n)


class BuiltinTemplate:
    """The same face as `ChatTemplate` for one of llama.cpp's built-in formats."""

    markers: ThinkingMarkers | None = None
    thinking_toggle: str | None = None
    supports_tools = False  # tools are described in the system message (generic_tools.py)

    def __init__(self, name: str) -> None:
        if name not in builtin_template_names():
            raise TemplateError(f"{name!r} is not one of llama.cpp's built-in chat templates")
        self.name = name

    def render(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        continue_final_message: bool = False,
        **_template_kwargs: Any,
    ) -> str:
        """The prompt for `messages`; tools cannot be shown by these formats (400)."""
        if tools:
            raise TemplateError(
                f"the built-in chat template {self.name!r} cannot show tools; use a Jinja template"
            )
        return render_turns(messages, add_generation_prompt, continue_final_message, self._apply)

    def _apply(self, messages: list[Message], add_assistant: bool) -> str:
        roles = [str(m.get("role") or "").encode() for m in messages]
        contents = ["\n".join(part_texts(m.get("content"))).encode() for m in messages]
        chat = (llama_cpp.llama_chat_message * len(messages))()
        for i, (role, content) in enumerate(zip(roles, contents, strict=True)):
            chat[i].role, chat[i].content = role, content
        size = 2 * sum(len(r) + len(c) for r, c in zip(roles, contents, strict=True)) + 256
        for _ in range(2):
            buf = ctypes.create_string_buffer(size)
            n = llama_cpp.llama_chat_apply_template(
                self.name.encode(), chat, len(messages), add_assistant, buf, size
            )
            if n < 0:
                raise TemplateError(f"llama.cpp could not apply the {self.name!r} chat template")
            if n <= size:
                return buf.raw[:n].decode("utf-8", errors="replace")
            size = n
        raise TemplateError(f"llama.cpp could not apply the {self.name!r} chat template")
