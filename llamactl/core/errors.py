"""Every error a user may see, in one tree; each class says once how front ends report it.

`exit_code` is what the CLI exits with, `http_status` and `error_type` what the server answers
(`error_type` in OpenAI's spelling; server/errors.py renames it for Anthropic). Front ends read
these attributes and never test for classes, so a new error only needs its class here. Every
501 is a `NotSupportedError`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

EXIT_FAILURE = 1  # an error meant for users: one red line
EXIT_USAGE = 2  # a bad command line, as click reports it
EXIT_CANNOT_START = 3  # a server could not start (uvicorn's code for a port in use)
EXIT_INTERRUPTED = 130  # what shells report for a command stopped by Ctrl-C


class LlamactlError(Exception):
    """Base of every error a user may see; its message is meant for humans."""

    exit_code: int = EXIT_FAILURE
    http_status: int = 500
    error_type: str = "server_error"

    def details(self) -> dict[str, Any]:
        """Fields an API error body carries besides the message (llama-server's, e.g. a
        context overflow's `n_prompt_tokens` and `n_ctx`)."""
        return {}


class UsageError(LlamactlError):
    """A command line the command cannot run (exit 2 like click's usage errors)."""

    exit_code = EXIT_USAGE
    http_status = 400
    error_type = "invalid_request_error"


# ------------------------------------------------------------------------- models and config
class ModelNotFoundError(LlamactlError):
    """No model file at the path or under the name given."""


class ModelLoadError(LlamactlError):
    """The file is there but cannot be used (not a GGUF, unsupported, too big)."""


class ConfigError(LlamactlError):
    """A setting (flag, variable, config file) has a value llamactl refuses."""


# -------------------------------------------------------------------------------- requests
class InvalidRequestError(LlamactlError):
    """The caller asked for something invalid (bad parameter, bad messages)."""

    http_status = 400
    error_type = "invalid_request_error"


class TemplateError(InvalidRequestError):
    """The chat template refused the messages or failed to render."""


class ContextLengthError(LlamactlError):
    """The prompt (plus what must be generated) does not fit a slot's context."""

    http_status = 400
    error_type = "exceed_context_size_error"

    def __init__(self, n_prompt: int, n_ctx: int, *, at_least: bool = False) -> None:
        has = f"at least {n_prompt}" if at_least else f"{n_prompt}"
        super().__init__(
            f"the request exceeds the available context size: the prompt has {has} tokens "
            f"and a slot holds {n_ctx}; shorten the prompt or raise --ctx-size"
        )
        self.n_prompt = n_prompt
        self.n_ctx = n_ctx

    def details(self) -> dict[str, Any]:
        return {"n_prompt_tokens": self.n_prompt, "n_ctx": self.n_ctx}


class NotSupportedError(LlamactlError):
    """The model or backend cannot do this at all (not a bad request): HTTP 501."""

    http_status = 501
    error_type = "not_supported_error"


def not_generating(model_id: str, decision_type: str | None) -> str:
    """Why text generation is refused (the server's 501 and the CLI's exit 1 say the same):
    a decision model names the endpoints it answers."""
    if decision_type is None:
        return f"'{model_id}' does not generate text"
    return (
        f"'{model_id}' is a decision model ({decision_type}): it answers "
        "POST /v1/systemone and POST /v1/decisions and does not generate text"
    )


# ------------------------------------------------------------------------------ the engine
class EngineClosedError(LlamactlError):
    """The engine shut down before (or while) serving the request."""

    http_status = 503
    error_type = "unavailable_error"


class QueueFullError(LlamactlError):
    """More requests are waiting than --max-queue allows."""

    http_status = 503
    error_type = "unavailable_error"


# ------------------------------------------------------------------------------------ files
class FileRefusedError(InvalidRequestError):
    """A file llamactl will not read: not a regular file (a FIFO or a device could block the
    reader forever or never end), or larger than a limit. Raised before a byte is read; the
    message names no directory, so an API answer never shows the server's paths."""


class FileTooLargeError(FileRefusedError):
    """A regular file larger than the caller's limit (its size read with fstat)."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"the file is {size} bytes, over the limit of {limit} bytes")
        self.size = size
        self.limit = limit


class QuotaExceededError(InvalidRequestError):
    """A write that would take a folder past its byte or file quota (slot saves)."""


# ------------------------------------------------------------------------------------ audio
class AudioDecodeError(InvalidRequestError):
    """The bytes are not audio llamactl can read."""


class AudioTooLongError(InvalidRequestError):
    """The audio is longer than the caller allows."""


class StreamClosedError(LlamactlError):
    """Audio was sent to a transcription stream that is closed."""


class BufferFullError(InvalidRequestError):
    """More audio is waiting to be read than the stream may hold (`max_buffered_seconds`)."""


class SynthesisError(LlamactlError):
    """The speech backend failed while speaking."""


class UnsupportedVoiceFeature(NotSupportedError):
    """The speech backend cannot do what was asked (e.g. clone a voice)."""


class CannotSpeakError(NotSupportedError):
    """The model has no speech generator this llamactl can drive."""


class AudioDeviceError(LlamactlError):
    """No PortAudio, no such device, or the device refused to open."""


class PlaybackUnavailable(AudioDeviceError):
    """No sound output: PortAudio is missing or no output device opens."""


# -------------------------------------------------------------------------------- decisions
class DecisionEvalError(LlamactlError):
    """The scores came out as NaN: the request fails as a whole (no partial answers)."""

    def __init__(self) -> None:
        super().__init__("the model could not evaluate the decision")


class DecisionNotSupportedError(NotSupportedError):
    """The model cannot take this input at all (images without an mmproj, or on a text-only
    type): a 501, not a 400."""


# ------------------------------------------------------------------------------- converters
class ConvertError(LlamactlError):
    """A conversion that cannot go ahead (bad option, missing base model, unknown family)."""


class CheckpointError(ConvertError):
    """A checkpoint file contradicts what the conversion needs: always the file, and the field
    (or tensor) when there is one, so the fix is obvious without a traceback."""

    def __init__(self, path: Path | str, field: str | None, problem: str) -> None:
        self.path = Path(path)
        self.field = field
        self.problem = problem
        where = f"{self.path}: {field}" if field else str(self.path)
        super().__init__(f"{where}: {problem}")


class CannotListenError(LlamactlError):
    """`serve` cannot listen where it was told (an address in use, a live socket file)."""

    exit_code = EXIT_CANNOT_START


# ---------------------------------------------------------------------------------- clients
class DownloadError(LlamactlError):
    """`llamactl pull` could not fetch a model: the hub unreachable (offline), no such repo or
    file, an ambiguous quantization, a download that does not match the hub's size or hash."""


class ServerError(LlamactlError):
    """A llamactl server could not be reached or refused the request (`llamactl ps`)."""


class TuiError(LlamactlError):
    """Base of every error the TUI shows instead of a traceback."""


class RealtimeClientError(TuiError):
    """Base of the realtime client's failures (the TUI and `transcribe --url` share it)."""


class ServerUnreachableError(RealtimeClientError):
    """Nothing answers at the URL (refused, timed out, DNS), or it is not a llamactl server."""


class AuthenticationError(RealtimeClientError):
    """The server refused the API key (HTTP 401/403 at the websocket handshake)."""


class ConnectionClosedError(RealtimeClientError):
    """The websocket closed while the session was in use."""


class LocalServerError(TuiError):
    """The in-process server could not start (model missing, load failure)."""


# ------------------------------------------------------------------------------- the router
class ChildFailedError(ModelLoadError):
    """A router's child server exited, or said its model failed to load, before it was ready."""


class UpstreamError(LlamactlError):
    """A router's child broke the connection, or answered nonsense, after the request was
    written: it may have seen the request, so sending it again could run it twice."""

    http_status = 502


class UpstreamConnectError(UpstreamError):
    """Nothing listens on the child's port: the request was never sent (safe to retry)."""

    http_status = 503
    error_type = "unavailable_error"


# ------------------------------------------------------------------------- the Realtime API
MAX_PROTOCOL_MESSAGE = 1024  # messages quote client values; a long one is cut, never echoed


def _cut(text: str | None) -> str | None:
    if text is None or len(text) <= MAX_PROTOCOL_MESSAGE:
        return text
    return text[: MAX_PROTOCOL_MESSAGE - 3] + "..."


class ProtocolError(InvalidRequestError):
    """A Realtime client event the server refuses; it becomes an `error` event and the socket
    stays open. `code`, `param` and `type` are the event's fields."""

    def __init__(
        self,
        message: str,
        *,
        code: str = "invalid_value",
        param: str | None = None,
        type_: str = "invalid_request_error",
    ) -> None:
        message = _cut(message) or ""
        super().__init__(message)
        self.message = message
        self.code = code
        self.param = _cut(param)
        self.type = type_
        self.error_type = type_


__all__ = [
    "not_generating",
    "EXIT_CANNOT_START",
    "EXIT_FAILURE",
    "EXIT_INTERRUPTED",
    "EXIT_USAGE",
    "AudioDecodeError",
    "AudioDeviceError",
    "AudioTooLongError",
    "AuthenticationError",
    "BufferFullError",
    "CannotListenError",
    "CannotSpeakError",
    "CheckpointError",
    "ChildFailedError",
    "ConfigError",
    "ConnectionClosedError",
    "ContextLengthError",
    "ConvertError",
    "DecisionEvalError",
    "DecisionNotSupportedError",
    "DownloadError",
    "EngineClosedError",
    "FileRefusedError",
    "FileTooLargeError",
    "InvalidRequestError",
    "LlamactlError",
    "LocalServerError",
    "ModelLoadError",
    "ModelNotFoundError",
    "NotSupportedError",
    "PlaybackUnavailable",
    "ProtocolError",
    "QueueFullError",
    "QuotaExceededError",
    "RealtimeClientError",
    "ServerError",
    "ServerUnreachableError",
    "StreamClosedError",
    "SynthesisError",
    "TemplateError",
    "TuiError",
    "UnsupportedVoiceFeature",
    "UpstreamConnectError",
    "UpstreamError",
    "UsageError",
]
