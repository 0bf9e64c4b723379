"""Anthropic's API: Messages (and its token count)."""
