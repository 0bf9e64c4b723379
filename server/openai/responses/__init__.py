"""OpenAI Responses API (`/v1/responses`) over the chat engine; see docs/api-responses.md."""
