"""The chat layer: templates, reasoning and tool-call parsing (pure Python, no model needed), and
`ChatModel` (`model.py`), which joins them with the engine; import it from there or the face."""

from llamactl.engine.chat.markers import (
    THINK,
    ThinkingMarkers,
    prompt_opens_reasoning,
    supports_enable_thinking,
    thinking_markers,
    thinking_toggle,
)
from llamactl.engine.chat.messages import content_text
from llamactl.engine.chat.pipeline import (
    DeltaStage,
    OutputPipeline,
    PlainTextParser,
    TextStage,
    output_parser,
)
from llamactl.engine.chat.reasoning import ChatDelta, ReasoningParser, coalesce, split_reasoning
from llamactl.engine.chat.template import CHATML_TEMPLATE, ChatTemplate
from llamactl.engine.chat.tools import (
    ToolCall,
    ToolCallFormat,
    ToolCallParser,
    make_tool_call_id,
    parse_tool_calls,
    tool_call_format,
    tool_call_grammar,
)

__all__ = [
    "CHATML_TEMPLATE",
    "THINK",
    "ChatDelta",
    "ChatTemplate",
    "DeltaStage",
    "OutputPipeline",
    "PlainTextParser",
    "ReasoningParser",
    "TextStage",
    "ThinkingMarkers",
    "ToolCall",
    "ToolCallFormat",
    "ToolCallParser",
    "coalesce",
    "content_text",
    "make_tool_call_id",
    "output_parser",
    "parse_tool_calls",
    "prompt_opens_reasoning",
    "split_reasoning",
    "supports_enable_thinking",
    "thinking_markers",
    "thinking_toggle",
    "tool_call_format",
    "tool_call_grammar",
]
