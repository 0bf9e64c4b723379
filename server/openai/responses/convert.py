"""A Responses request → the chat request the engine runs (spec §13.1).

Items become chat messages; tools, `text.format` and `reasoning` become template inputs,
a grammar and the thinking switch. Everything here is pure, so it is unit-tested without a model.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from llamactl import InvalidRequestError, json_grammar, json_schema_grammar

from ...errors import bad_request
from ...limits import RequestLimits
from .protocol import (
    FunctionCallItem,
    FunctionCallOutputItem,
    FunctionTool,
    InputFile,
    InputImage,
    InputText,
    ItemReference,
    MessageItem,
    OutputText,
    ReasoningConfig,
    ReasoningItem,
    Refusal,
    TextConfig,
    TextFormatJSONObject,
    TextFormatJSONSchema,
)

log = logging.getLogger("llamactl.server")

Item = MessageItem | FunctionCallItem | FunctionCallOutputItem | ReasoningItem
Resolve = Callable[[str], Item | None]  # item id → a stored item


# ------------------------------------------------------------------------ items → chat


def resolve_items(items: Sequence[Any], resolve: Resolve, field_name: str = "input") -> list[Item]:
    """Replace `item_reference`s by the stored items they name."""
    out: list[Item] = []
    for i, item in enumerate(items):
        if isinstance(item, ItemReference):
            found = resolve(item.id)
            if found is None:
                raise bad_request(
                    f"Field '{field_name}.{i}.id': no stored item with id '{item.id}'"
                )
            item = found
        out.append(item)
    return out


def items_to_messages(items: Sequence[Item], offset: int = 0) -> list[dict[str, Any]]:
    """Chat messages for `items`; consecutive assistant items merge into one message.

    `offset` is how many items came from a previous response, so errors name `input.<i>`."""
    messages: list[dict[str, Any]] = []
    names: dict[str, str] = {}  # call_id → function name, for the tool message

    def assistant() -> dict[str, Any]:
        if messages and messages[-1]["role"] == "assistant":
            return messages[-1]
        messages.append({"role": "assistant", "content": ""})
        return messages[-1]

    for i, item in enumerate(items):
        where = f"input.{i - offset}"
        if isinstance(item, MessageItem):
            if item.role == "assistant":
                msg = assistant()
                msg["content"] = _join(msg["content"], _assistant_text(item.content, where))
            else:
                role = "system" if item.role == "developer" else item.role
                messages.append({"role": role, "content": _user_content(item.content, where)})
        elif isinstance(item, FunctionCallItem):
            names[item.call_id] = item.name
            call = {
                "id": item.call_id,
                "type": "function",
                "function": {"name": item.name, "arguments": item.arguments},
            }
            assistant().setdefault("tool_calls", []).append(call)
        elif isinstance(item, FunctionCallOutputItem):
            msg = {"role": "tool", "content": _output_text(item.output, f"{where}.output")}
            if item.call_id is not None:
                msg["tool_call_id"] = item.call_id
            name = names.get(item.call_id or "") or _output_name(item)
            if name:
                msg["name"] = name
            messages.append(msg)
        elif isinstance(item, ReasoningItem):
            text = reasoning_text(item)
            msg = assistant()
            msg["reasoning_content"] = _join(msg.get("reasoning_content") or "", text, "\n")
        else:  # pragma: no cover - the protocol's union admits nothing else
            raise bad_request(f"Field '{where}': Cannot determine type of 'item'")
    return messages


def _output_name(item: FunctionCallOutputItem) -> str | None:
    """The name an output without a call gives itself ("agent.goal_objective")."""
    if item.name and item.namespace:
        return f"{item.namespace}.{item.name}"
    return item.name


def reasoning_text(item: ReasoningItem) -> str:
    """The reasoning content if the item carries it, else its summary."""
    if item.content:
        return "".join(part.text for part in item.content)
    return "\n\n".join(part.text for part in item.summary)


def _join(a: str, b: str, sep: str = "\n\n") -> str:
    return f"{a}{sep}{b}" if a and b else a or b


def _user_content(content: str | list[Any], where: str) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        if isinstance(part, InputText | OutputText):
            parts.append({"type": "text", "text": part.text})
        elif isinstance(part, InputImage):
            if not part.image_url:
                raise bad_request(f"Field '{where}.content.{j}.image_url' is required")
            parts.append({"type": "image_url", "image_url": {"url": part.image_url}})
        elif isinstance(part, InputFile):
            raise bad_request(f"Field '{where}.content.{j}': 'input_file' is not supported")
        else:
            raise bad_request(
                f"Field '{where}.content.{j}': '{part.type}' parts belong to assistant messages"
            )
    # One text part renders as plain content: templates that concatenate strings then work.
    if len(parts) == 1 and parts[0]["type"] == "text":
        return parts[0]["text"]
    return parts


def _assistant_text(content: str | list[Any], where: str) -> str:
    if isinstance(content, str):
        return content
    texts = []
    for j, part in enumerate(content):
        if isinstance(part, InputText | OutputText):
            texts.append(part.text)
        elif isinstance(part, Refusal):
            texts.append(part.refusal)
        else:
            raise bad_request(
                f"Field '{where}.content.{j}': assistant messages take text parts, "
                f"not '{part.type}'"
            )
    return "".join(texts)


def _output_text(output: str | list[Any], where: str) -> str:
    if isinstance(output, str):
        return output
    texts = []
    for j, part in enumerate(output):
        if not isinstance(part, InputText | OutputText):
            raise bad_request(f"Field '{where}.{j}': only text tool outputs are supported")
        texts.append(part.text)
    return "\n\n".join(texts)


# ------------------------------------------------------------------------------- tools


@dataclass
class Tools:
    chat: list[dict[str, Any]] | None  # for the template (chat-completions shape)
    echo: list[dict[str, Any]] = field(default_factory=list)  # for the response object
    choice: str | dict[str, Any] = "auto"  # as given, echoed back

    @property
    def chat_choice(self) -> str | dict[str, Any]:
        """`tool_choice` in chat-completions spelling, for a chat layer that enforces it."""
        choice = self.choice
        if isinstance(choice, str):
            return choice
        if choice.get("type") == "function":
            return {"type": "function", "function": {"name": choice.get("name")}}
        return choice.get("mode", "auto")


def convert_tools(tools: Sequence[Any] | None, tool_choice: str | dict[str, Any] | None) -> Tools:
    """Function tools for the template, narrowed by `tool_choice`; hosted tools are skipped."""
    functions: list[FunctionTool] = []
    for tool in tools or ():
        if isinstance(tool, FunctionTool):
            functions.append(tool)
        else:
            log.warning("responses: skipping unsupported tool type '%s'", tool.type)
    echo = [
        {
            "type": "function",
            "name": t.name,
            "description": t.description,
            "parameters": t.parameters,
            "strict": True if t.strict is None else t.strict,
        }
        for t in functions
    ]
    choice = "auto" if tool_choice is None else tool_choice
    offered = _offered(functions, choice)
    chat = [
        {
            "type": "function",
            "function": {
                "name": t.name,
                **({"description": t.description} if t.description else {}),
                "parameters": t.parameters or {"type": "object", "properties": {}},
                "strict": True if t.strict is None else t.strict,
            },
        }
        for t in offered
    ]
    return Tools(chat or None, echo, choice)


def _offered(functions: list[FunctionTool], choice: str | dict[str, Any]) -> list[FunctionTool]:
    """The tools the model is shown: none for `none`, the named ones for a specific choice.
    `required` shows them all; enforcing it is the chat layer's (see `Tools.chat_choice`)."""
    if isinstance(choice, str):
        if choice == "none":
            return []
        if choice in ("auto", "required"):
            return functions
        raise bad_request(
            f"Field 'tool_choice': expected 'none', 'auto', 'required' or an object, got '{choice}'"
        )
    kind = choice.get("type")
    by_name = {t.name: t for t in functions}
    if kind == "function":
        name = choice.get("name")
        if name not in by_name:
            raise bad_request(f"Field 'tool_choice.name': no function tool named '{name}'")
        return [by_name[name]]
    if kind == "allowed_tools":
        allowed = choice.get("tools")
        if not isinstance(allowed, list):
            raise bad_request("Field 'tool_choice.tools' must be a list")
        names = {t.get("name") for t in allowed if isinstance(t, dict)}
        if choice.get("mode", "auto") not in ("auto", "required"):
            raise bad_request("Field 'tool_choice.mode': expected 'auto' or 'required'")
        return [t for t in functions if t.name in names]
    raise bad_request(
        f"Field 'tool_choice.type': expected 'function' or 'allowed_tools', got '{kind}'"
    )


# ------------------------------------------------------------------ text and reasoning


def text_grammar(text: TextConfig | None, limits: RequestLimits) -> str | None:
    """`text.format` → a grammar the sampler enforces, so the output always parses."""
    fmt = text.format if text else None
    if isinstance(fmt, TextFormatJSONObject):
        return json_grammar()
    if isinstance(fmt, TextFormatJSONSchema):
        limits.check_schema(fmt.json_schema, "text.format.schema")
        try:
            return json_schema_grammar(fmt.json_schema)
        except InvalidRequestError as exc:
            raise bad_request(f"Field 'text.format.schema': {exc}") from exc
    return None


def text_echo(text: TextConfig | None) -> dict[str, Any]:
    if text is None or text.format is None:
        out: dict[str, Any] = {"format": {"type": "text"}}
    else:
        out = {"format": text.format.model_dump(by_alias=True, exclude_none=True)}
    if text is not None and text.verbosity is not None:
        out["verbosity"] = text.verbosity
    return out


@dataclass(frozen=True)
class Thinking:
    enable: bool | None = None  # None: the template's default
    budget: int | None = None
    template_kwargs: dict[str, Any] = field(default_factory=dict)


def thinking(reasoning: ReasoningConfig | None) -> Thinking:
    """`reasoning.effort` "none"/"minimal" turns thinking off (and forces it shut if a template
    opens it anyway); other efforts turn it on and reach templates that read `reasoning_effort`."""
    if reasoning is None:
        return Thinking()
    effort, budget = reasoning.effort, reasoning.max_tokens
    if effort in ("none", "minimal"):
        return Thinking(enable=False, budget=0)
    if effort is None:
        return Thinking(budget=budget)
    return Thinking(enable=True, budget=budget, template_kwargs={"reasoning_effort": effort})
