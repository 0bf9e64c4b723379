"""Where the project's shared/ folder is: beside the repository (CI lays a copy there too)."""

from __future__ import annotations

from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / "shared"
CHAT_TEMPLATES = SHARED / "data" / "chat-templates"  # 70 real templates
