"""llama-server's token routes: `/tokenize`, `/detokenize`, `/apply-template`, and the chat
prompt's token count (`/v1/chat/completions/input_tokens`)."""

from .routes import router

__all__ = ["router"]
