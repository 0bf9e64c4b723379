"""Each error class says once how it is reported; the CLI and the server only read that.

The codes below are the ones users and clients see (exit codes, HTTP statuses and the error
`type` of OpenAI's body), so they must not drift when an error moves or a new one appears.
"""

from __future__ import annotations

import json

import pytest
import typer
from llamactl.server.errors import APIError, api_error_of, from_engine_error
from llamactl.server.stream_errors import (
    anthropic_error_frame,
    openai_error_frame,
    responses_error_event,
    stream_error_frame,
)
from typer.testing import CliRunner

from llamactl import (
    AudioDecodeError,
    BufferFullError,
    CannotSpeakError,
    CheckpointError,
    ConfigError,
    ContextLengthError,
    ConvertError,
    DecisionNotSupportedError,
    EngineClosedError,
    InvalidRequestError,
    LlamactlError,
    ModelLoadError,
    ModelNotFoundError,
    NotSupportedError,
    ProtocolError,
    QueueFullError,
    TemplateError,
    UnsupportedVoiceFeature,
    UsageError,
)
from llamactl.cli._output import usage_error
from llamactl.cli.main import LlamactlGroup

CASES = [
    (LlamactlError("x"), 1, 500, "server_error"),
    (ModelNotFoundError("x"), 1, 500, "server_error"),
    (ModelLoadError("x"), 1, 500, "server_error"),
    (ConfigError("x"), 1, 500, "server_error"),
    (ConvertError("x"), 1, 500, "server_error"),
    (CheckpointError("a.json", "f", "bad"), 1, 500, "server_error"),
    (InvalidRequestError("x"), 1, 400, "invalid_request_error"),
    (TemplateError("x"), 1, 400, "invalid_request_error"),
    (AudioDecodeError("x"), 1, 400, "invalid_request_error"),
    (BufferFullError("x"), 1, 400, "invalid_request_error"),
    (ContextLengthError(9, 4), 1, 400, "exceed_context_size_error"),
    (NotSupportedError("x"), 1, 501, "not_supported_error"),
    (CannotSpeakError("x"), 1, 501, "not_supported_error"),
    (UnsupportedVoiceFeature("x"), 1, 501, "not_supported_error"),
    (DecisionNotSupportedError("x"), 1, 501, "not_supported_error"),
    (QueueFullError("x"), 1, 503, "unavailable_error"),
    (EngineClosedError("x"), 1, 503, "unavailable_error"),
    (UsageError("x"), 2, 400, "invalid_request_error"),
    (ProtocolError("x"), 1, 400, "invalid_request_error"),
]


@pytest.mark.parametrize(("exc", "exit_code", "status", "type_"), CASES, ids=lambda c: str(c))
def test_each_error_says_how_it_is_reported(exc, exit_code, status, type_) -> None:
    assert (exc.exit_code, exc.http_status, exc.error_type) == (exit_code, status, type_)
    api = from_engine_error(exc)
    assert (api.status, api.message, api.type) == (status, str(exc), type_)


def test_a_refused_realtime_event_keeps_its_own_type() -> None:
    exc = ProtocolError("busy", type_="server_error", code="too_many_sessions")
    assert (exc.type, exc.code, exc.error_type) == (
        "server_error",
        "too_many_sessions",
        "server_error",
    )
    assert len(ProtocolError("x" * 5000).message) == 1024


def test_api_errors_pass_through_and_unexpected_ones_are_500s() -> None:
    err = APIError(404, "Response with id 'r' not found.")
    assert from_engine_error(err) is err and err.type == "not_found_error"
    unexpected = api_error_of(RuntimeError("boom"))
    assert (unexpected.status, unexpected.message) == (500, "internal error: boom")


def test_each_api_family_ends_a_stream_in_its_own_shape() -> None:
    frame = openai_error_frame(QueueFullError("full"))
    assert frame.startswith("data: ") and frame.endswith("\n\n")
    body = {"code": 503, "message": "full", "type": "unavailable_error"}
    assert json.loads(frame[6:]) == {"error": body}
    name, data = anthropic_error_frame(QueueFullError("full")).split("\n")[:2]
    assert name == "event: error"
    assert json.loads(data[6:]) == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "full"},
    }
    assert responses_error_event(RuntimeError("cut")) == {
        "type": "error",
        "code": "server_error",
        "message": "cut",
        "param": None,
    }
    assert stream_error_frame("/v1/completions", QueueFullError("full")) == frame


def test_the_cli_exits_with_the_errors_code() -> None:
    app = typer.Typer(cls=LlamactlGroup)

    @app.callback()
    def main() -> None:
        """A group, as `llamactl` is."""

    @app.command()
    def bad(usage: bool = False) -> None:
        if usage:
            usage_error("give a prompt")
        raise ModelNotFoundError("no such model")

    runner = CliRunner()
    result = runner.invoke(app, ["bad", "--usage"])
    assert result.exit_code == 2 and "Error: give a prompt" in result.output
    result = runner.invoke(app, ["bad"])
    assert result.exit_code == 1 and "Error: no such model" in result.output
