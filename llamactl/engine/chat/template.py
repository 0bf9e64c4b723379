"""Rendering a conversation into a prompt with the model's own Jinja chat template.

Models ship their templates in GGUF metadata, written for Hugging Face's renderer; we reproduce
its behaviour (sandbox, extras, assistant prefill) so prompts match what the model was trained on.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

import jinja2

from llamactl.core.errors import InvalidRequestError, TemplateError
from llamactl.engine.chat.environment import TemplateRaisedError, compile_template
from llamactl.engine.chat.markers import (
    ThinkingMarkers,
    supports_enable_thinking,
    thinking_markers,
    thinking_toggle,
)
from llamactl.engine.chat.messages import (
    Message,
    check_messages,
    encode_messages,
    encodings,
    misrendered,
    part_texts,
)

# For models whose GGUF carries no template: ChatML is what most fine-tunes default to.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


class ChatTemplate:
    """A compiled chat template plus the special-token strings it refers to."""

    def __init__(
        self,
        source: str,
        *,
        bos_token: str = "",
        eos_token: str = "",
        special_tokens: Mapping[str, str] | None = None,
    ) -> None:
        try:
            self._template = compile_template(source)
        except jinja2.TemplateSyntaxError as exc:
            raise TemplateError(
                f"the chat template has a syntax error on line {exc.lineno}: {exc.message}"
            ) from exc
        self.source = source
        self._tokens: dict[str, str] = {
            **(special_tokens or {}),
            "bos_token": bos_token,
            "eos_token": eos_token,
        }
        # Templates that never mention reasoning_content read it as `reasoning` or `thinking`.
        self._alias_reasoning = "reasoning_content" not in source
        self.markers: ThinkingMarkers | None = thinking_markers(source)
        self.thinking_toggle: str | None = thinking_toggle(source)
        self.supports_enable_thinking: bool = supports_enable_thinking(source)
        self.supports_tools: bool = re.search(r"\btools\b", source) is not None

    @classmethod
    def chatml(cls, *, bos_token: str = "", eos_token: str = "<|im_end|>") -> ChatTemplate:
        """The fallback for models that ship no template."""
        return cls(CHATML_TEMPLATE, bos_token=bos_token, eos_token=eos_token)

    def render(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        continue_final_message: bool = False,
        **template_kwargs: Any,
    ) -> str:
        """The prompt text for `messages`.

        With `continue_final_message` the last (assistant) message is left open so the model
        continues it; callers must then pass `add_generation_prompt=False`.
        """
        return render_turns(
            messages,
            add_generation_prompt,
            continue_final_message,
            lambda msgs, add_gen: self._render(msgs, tools, add_gen, template_kwargs),
        )

    def _render(
        self,
        messages: list[Message],
        tools: Sequence[Mapping[str, Any]] | None,
        add_generation_prompt: bool,
        template_kwargs: dict[str, Any],
    ) -> str:
        context: dict[str, Any] = {
            **self._tokens,
            **_today(),
            **template_kwargs,
            "add_generation_prompt": add_generation_prompt,
        }
        if tools:
            # Left undefined otherwise: several templates test `tools is defined` only.
            context["tools"] = [dict(tool) for tool in tools]
        first_error: Exception | None = None
        fallback: str | None = None
        # Try the most faithful encoding first; fall back while the template errors or garbles.
        for encoding in encodings(messages):
            encoded = encode_messages(messages, encoding, alias_reasoning=self._alias_reasoning)
            try:
                rendered = self._template.render(messages=encoded, **context)
            except InvalidRequestError:
                raise
            except Exception as exc:  # whatever fails inside the template is its error
                first_error = first_error or exc
                continue
            if not misrendered(rendered, encoded):
                return rendered
            fallback = rendered if fallback is None else fallback
        if fallback is not None:
            return fallback
        assert first_error is not None
        raise _template_error(first_error) from first_error


def _template_error(exc: Exception) -> TemplateError:
    if isinstance(exc, TemplateRaisedError):
        return TemplateError(f"the chat template rejected the request: {exc}")
    return TemplateError(f"the chat template failed to render: {type(exc).__name__}: {exc}")


def render_turns(
    messages: Sequence[Message],
    add_generation_prompt: bool,
    continue_final_message: bool,
    apply: Callable[[list[Message], bool], str],
) -> str:
    """The one set of rules for a prompt, whatever writes it (`apply(messages,
    add_generation_prompt)`: Jinja, or llama.cpp's built-in formats): checked messages, and a
    continued final assistant message left open after its text."""
    if add_generation_prompt and continue_final_message:
        raise TemplateError(
            "Cannot set both add_generation_prompt and continue_final_message to true."
        )
    messages = list(messages)
    check_messages(messages)
    if not continue_final_message:
        return apply(messages, add_generation_prompt)
    prefill = _prefill_text(messages)
    if not prefill.strip():
        # Nothing to continue: that is just a fresh assistant turn.
        return apply(messages[:-1], True)
    return _cut_after(apply(messages, False), prefill)


def _prefill_text(messages: Sequence[Message]) -> str:
    """The text the model is to continue; checks the conversation ends with one assistant turn."""
    if not messages or messages[-1].get("role") != "assistant":
        raise TemplateError("continue_final_message needs the last message to be the assistant's.")
    if len(messages) >= 2 and messages[-2].get("role") == "assistant":
        raise TemplateError("Cannot have 2 or more assistant messages at the end of the list.")
    texts = part_texts(messages[-1].get("content"))
    # The last part is the rendered tail whether the template joins parts or prints them singly.
    return texts[-1] if texts else ""


def _cut_after(rendered: str, prefill: str) -> str:
    """Drop whatever the template rendered after the final message's text (end-of-turn tokens)."""
    core = prefill.strip()
    at = rendered.rfind(core)
    if at < 0:
        raise TemplateError(
            "the chat template altered the final assistant message, so it cannot be continued."
        )
    end = at + len(core)
    trailing = prefill[len(prefill.rstrip()) :]
    if trailing and rendered.startswith(trailing, end):
        end += len(trailing)
    return rendered[:end]


def _today() -> dict[str, str]:
    """The dates llama.cpp gives every template (Llama 3.x prints `date_string`, FireFunction
    `datetime`), so a prompt says what day it is wherever the model runs."""
    now = datetime.now()
    return {"date_string": now.strftime("%d %b %Y"), "datetime": now.strftime("%b %d %Y")}
