"""Anthropic request → the engine's OpenAI-style chat: messages, tools and thinking settings.

Chat templates are written for OpenAI-shaped messages, so Anthropic's blocks are mapped onto
them: `tool_result` blocks become `tool` messages placed before the rest of their user turn,
`tool_use` blocks become `tool_calls`, and `thinking` blocks become `reasoning_content`
(redacted thinking is opaque and dropped). `system` messages among the turns join the system
prompt when they lead, else the user's side of the conversation (templates take one system
message, first). Claude Code's billing line is dropped from system text: it carries a stamp
that changes with every session and would defeat the prompt cache.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ...errors import bad_request
from .protocol import (
    DEFAULT_THINKING_BUDGET,
    CountTokensRequest,
    ImageBlockParam,
    MessageParam,
    RedactedThinkingBlockParam,
    TextBlockParam,
    ThinkingBlockParam,
    ThinkingParam,
    ToolChoiceParam,
    ToolResultBlockParam,
    ToolUseBlockParam,
    UnsupportedBlockParam,
)


@dataclass(frozen=True)
class ThinkingPlan:
    """How a request's `thinking` maps onto the engine and onto the reply's blocks."""

    enable: bool | None = None  # the template's thinking toggle; None: the model's default
    budget: int | None = None  # reasoning tokens before the end of thinking is forced
    keep: bool = True  # False: thinking is disabled, reasoning never reaches the client
    omit_text: bool = False  # display "omitted": thinking blocks carry only their signature


def thinking_plan(thinking: ThinkingParam | None) -> ThinkingPlan:
    """No `thinking` (or adaptive) leaves the model's default: a reasoning model still reasons,
    and its reasoning is returned as thinking blocks, as llama-server does."""
    if thinking is None:
        return ThinkingPlan()
    omit = thinking.display == "omitted"
    if thinking.type == "enabled":
        budget = thinking.budget_tokens or DEFAULT_THINKING_BUDGET
        return ThinkingPlan(enable=True, budget=budget, omit_text=omit)
    if thinking.type == "disabled":
        return ThinkingPlan(enable=False, budget=0, keep=False)
    return ThinkingPlan(omit_text=omit)


def _unsupported(where: str, block: UnsupportedBlockParam) -> Exception:
    return bad_request(
        f"Field '{where}': content blocks of type '{block.type}' are not supported; "
        "this server's model takes text only"
    )


def _misplaced(where: str, kind: str, role: str) -> Exception:
    return bad_request(f"Field '{where}': a '{kind}' block cannot appear in a {role} message")


def _text_parts(texts: list[str] | list[str | dict[str, Any]]) -> list[dict[str, Any]] | str:
    """One text stays a plain string (what most templates print); several stay parts, which the
    chat layer keeps or joins as the template expects. Image parts stay as they are."""
    if not texts:
        return ""
    if len(texts) == 1 and isinstance(texts[0], str):
        return texts[0]
    return [{"type": "text", "text": t} if isinstance(t, str) else t for t in texts]


def _tool_result_text(where: str, block: ToolResultBlockParam) -> str:
    texts = []
    for j, part in enumerate(block.content):
        if isinstance(part, UnsupportedBlockParam):
            raise _unsupported(f"{where}.content.{j}", part)
        texts.append(part.text)
    return "\n\n".join(texts)


def _image_part(where: str, block: ImageBlockParam) -> dict[str, Any]:
    """An image block as the OpenAI `image_url` part the chat layer reads (a data URL)."""
    source = block.source
    if source.type != "base64":
        raise bad_request(
            f"Field '{where}': 'image' blocks with a '{source.type}' source are not supported "
            "(llamactl never downloads); send the image as 'base64'"
        )
    if not source.data:
        raise bad_request(f"Field '{where}': the 'image' block's source.data is required")
    media_type = source.media_type or "image/png"
    if not media_type.startswith("image/"):
        raise bad_request(
            f"Field '{where}': the 'image' block's source.media_type must be an image type"
        )
    return {"type": "image_url", "image_url": {"url": f"data:{media_type};base64,{source.data}"}}


def _user_turn(i: int, message: MessageParam, tool_names: dict[str, str]) -> list[dict[str, Any]]:
    """Tool results first (they answer the previous assistant turn), then the user's text and
    images."""
    out: list[dict[str, Any]] = []
    texts: list[str | dict[str, Any]] = []
    for j, block in enumerate(message.content):
        where = f"messages.{i}.content.{j}"
        if isinstance(block, TextBlockParam):
            texts.append(block.text)
        elif isinstance(block, ImageBlockParam):
            texts.append(_image_part(where, block))
        elif isinstance(block, ToolResultBlockParam):
            tool: dict[str, Any] = {
                "role": "tool",
                "tool_call_id": block.tool_use_id,
                "content": _tool_result_text(where, block),
            }
            if block.tool_use_id in tool_names:
                tool["name"] = tool_names[block.tool_use_id]
            out.append(tool)
        elif isinstance(block, UnsupportedBlockParam):
            raise _unsupported(where, block)
        else:
            raise _misplaced(where, block.type, "user")
    if texts or not out:
        out.append({"role": "user", "content": _text_parts(texts)})
    return out


def _assistant_turn(i: int, message: MessageParam, tool_names: dict[str, str]) -> dict[str, Any]:
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[dict[str, Any]] = []
    for j, block in enumerate(message.content):
        where = f"messages.{i}.content.{j}"
        if isinstance(block, TextBlockParam):
            texts.append(block.text)
        elif isinstance(block, ThinkingBlockParam):
            thoughts.append(block.thinking)
        elif isinstance(block, RedactedThinkingBlockParam):
            continue
        elif isinstance(block, ToolUseBlockParam):
            tool_names[block.id] = block.name
            arguments = json.dumps(block.input, ensure_ascii=False)
            calls.append(
                {
                    "id": block.id,
                    "type": "function",
                    "function": {"name": block.name, "arguments": arguments},
                }
            )
        elif isinstance(block, UnsupportedBlockParam):
            raise _unsupported(where, block)
        else:
            raise _misplaced(where, block.type, "assistant")
    out: dict[str, Any] = {"role": "assistant", "content": _text_parts(texts)}
    if thoughts:
        out["reasoning_content"] = "\n\n".join(thoughts)
    if calls:
        out["tool_calls"] = calls
    return out


BILLING_HEADER = "x-anthropic-billing-header:"


def _instructions(texts: list[str]) -> list[str]:
    """System texts without Claude Code's billing line (`x-anthropic-billing-header:
    cc_version=2.1.197.<stamp>; cc_entrypoint=cli; cch=…;`): metadata for Anthropic's
    billing, new with every session, that would make each one's prompt differ from its first
    line on (vLLM, SGLang and Ollama drop it as well; llama-server blanks its `cch=`)."""
    out = []
    for text in texts:
        lines = text.split("\n")
        kept = [ln for ln in lines if not ln.lstrip().lower().startswith(BILLING_HEADER)]
        if len(kept) < len(lines):
            text = "\n".join(kept).strip("\n")
        if text.strip():
            out.append(text)
    return out


def _system_turn(i: int, message: MessageParam) -> list[str]:
    texts = []
    for j, block in enumerate(message.content):
        where = f"messages.{i}.content.{j}"
        if isinstance(block, TextBlockParam):
            texts.append(block.text)
        elif isinstance(block, UnsupportedBlockParam):
            raise _unsupported(where, block)
        else:
            raise _misplaced(where, block.type, "system")
    return _instructions(texts)


def _as_parts(content: str | list[dict[str, Any]]) -> list[str | dict[str, Any]]:
    if isinstance(content, str):
        return [content] if content else []
    return [p["text"] if p.get("type") == "text" else p for p in content]


def chat_messages(req: CountTokensRequest) -> list[dict[str, Any]]:
    """The conversation as the chat layer takes it, system prompt first."""
    system = _instructions([block.text for block in req.system or ()])
    out: list[dict[str, Any]] = []
    tool_names: dict[str, str] = {}
    instructions: dict[str, Any] | None = None  # a user message made of system text alone
    for i, message in enumerate(req.messages):
        if message.role == "system":
            texts = _system_turn(i, message)
            if not out:  # before any turn: part of the system prompt
                system.extend(texts)
            elif texts:  # among the turns: on the user's side, beside the user's own text
                if out[-1]["role"] == "user":
                    parts = _as_parts(out[-1]["content"]) + list(texts)
                    out[-1]["content"] = _text_parts(parts)
                else:
                    instructions = {"role": "user", "content": _text_parts(list(texts))}
                    out.append(instructions)
        elif message.role == "user":
            turn = _user_turn(i, message, tool_names)
            if out and out[-1] is instructions and turn[0]["role"] == "user":
                # the user's turn joins the instructions just put on its side: one message
                out[-1]["content"] = _text_parts(
                    _as_parts(out[-1]["content"]) + _as_parts(turn[0]["content"])
                )
                turn = turn[1:]
            out.extend(turn)
        else:
            out.append(_assistant_turn(i, message, tool_names))
    if system:
        out.insert(0, {"role": "system", "content": "\n\n".join(system)})
    return out


def chat_tools(req: CountTokensRequest) -> list[dict[str, Any]] | None:
    """Tools in the OpenAI shape templates render; none at all when `tool_choice` is none."""
    if not req.tools or (req.tool_choice is not None and req.tool_choice.type == "none"):
        return None
    tools = []
    for tool in req.tools:
        function: dict[str, Any] = {"name": tool.name, "parameters": tool.input_schema}
        if tool.description:
            function["description"] = tool.description
        tools.append({"type": "function", "function": function})
    return tools


def openai_tool_choice(req: CountTokensRequest) -> str | dict[str, Any] | None:
    """`tool_choice` in OpenAI's spelling (auto, required, none, or one named function)."""
    choice: ToolChoiceParam | None = req.tool_choice
    if choice is None:
        return None
    names = [tool.name for tool in req.tools or ()]
    if choice.type in ("any", "tool") and not names:
        raise bad_request(f"Field 'tool_choice': type '{choice.type}' needs 'tools'")
    if choice.type == "tool":
        if choice.name not in names:
            raise bad_request(f"Field 'tool_choice.name': no tool is named '{choice.name}'")
        return {"type": "function", "function": {"name": choice.name}}
    return {"auto": "auto", "any": "required", "none": "none"}[choice.type]
