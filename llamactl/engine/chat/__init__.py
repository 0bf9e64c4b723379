"""The chat layer's pure-Python parts: prompt rendering and output splitting (no model needed)."""

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
    "coalesce",
    "content_text",
    "output_parser",
    "prompt_opens_reasoning",
    "split_reasoning",
    "supports_enable_thinking",
    "thinking_markers",
    "thinking_toggle",
]
