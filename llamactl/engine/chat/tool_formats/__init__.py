"""Tool-call formats of the model families: detection, readers and grammars (see tools.py)."""

from llamactl.engine.chat.tool_formats.base import ParsedCall, Syntax, ToolCallFormat, ToolSpec
from llamactl.engine.chat.tool_formats.detect import tool_call_format
from llamactl.engine.chat.tool_formats.registry import SYNTAXES

__all__ = ["SYNTAXES", "ParsedCall", "Syntax", "ToolCallFormat", "ToolSpec", "tool_call_format"]
