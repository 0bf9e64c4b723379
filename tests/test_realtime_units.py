"""Pieces of realtime conversation sessions that need no server: cutting an answer into
speakable pieces, mapping heard audio back to text, and session settings."""

from __future__ import annotations

import numpy as np
import pytest
from llamactl.server.openai.realtime.conversation_config import merge, new_config
from llamactl.server.openai.realtime.speaker import SentenceSplitter, Span, Speaker, speakable

from llamactl.core.errors import ProtocolError

ANSWER = (
    "The capital of France is Paris, a city steeped in history and culture. It has the "
    "Eiffel tower, many museums, and lovely cafes along the river where people sit.\nBye!"
)


def _pieces(text: str, step: int) -> list[tuple[str, int, int]]:
    split = SentenceSplitter()
    out = []
    for i in range(0, len(text), step):
        out += split.feed(text[i : i + step])
    return out + split.flush()


@pytest.mark.parametrize("step", [1, 3, 1000])
def test_pieces_cover_the_text_exactly_however_it_streams(step):
    pieces = _pieces(ANSWER, step)
    assert "".join(p for p, _, _ in pieces) == ANSWER
    assert [(a, b) for _, a, b in pieces] == [
        (a, a + len(p)) for p, a, _ in pieces
    ]  # offsets are contiguous
    if step < 10:  # streamed: the first piece is cut at a comma, so speech starts early
        assert pieces[0][0] == "The capital of France is Paris, "
    assert any(p.endswith("culture. ") for p, _, _ in pieces)


def test_speakable_drops_markup():
    assert speakable("**Bold** and `code` # title") == "Bold and code title"


def test_heard_text_whole_pieces_then_a_word_boundary():
    speaker = Speaker.__new__(Speaker)  # only the span bookkeeping is used
    speaker.rate = 1000
    text = "One two three. Four five six seven eight."
    speaker.spans = [Span(0, 15, 0, 1000), Span(15, len(text), 1000, 3000)]
    assert speaker.heard_text(text, 0) == ""
    assert speaker.heard_text(text, 1000) == "One two three."
    assert speaker.heard_text(text, 500) == "One two"  # half of the piece, at a space
    half = speaker.heard_text(text, 2000)
    assert half.startswith("One two three. Four") and text.startswith(half)
    assert speaker.heard_text(text, 5000) == text


def test_session_update_merging_and_refusals():
    config = new_config("model", "whisper")
    assert config.create_response and config.interrupt_response
    update = {"audio": {"input": {"turn_detection": {"interrupt_response": False}}}}
    new = merge(config, update, {"whisper"}, {"model"})
    assert new.create_response and not new.interrupt_response
    off = merge(config, {"audio": {"input": {"turn_detection": None}}}, {"whisper"}, {"model"})
    assert not off.create_response and not off.interrupt_response
    both = merge(config, {"output_modalities": ["text", "audio"]}, set(), {"model"})
    assert both.output.modalities == ["audio"]
    for bad, param in (
        ({"output_modalities": ["video"]}, "session.output_modalities"),
        ({"max_output_tokens": 5000}, "session.max_output_tokens"),
        ({"model": "other"}, "session.model"),
        ({"tools": [{"type": "function", "name": "f"}]}, "session.tools"),
        (
            {"audio": {"output": {"format": {"type": "audio/pcmu"}}}},
            "session.audio.output.format.type",
        ),
        ({"audio": {"output": {"speed": 9}}}, "session.audio.output.speed"),
        ({"temperature": -1}, "session.temperature"),
    ):
        with pytest.raises(ProtocolError) as err:
            merge(config, bad, set(), {"model"})
        assert err.value.param == param
    assert config.output.modalities == ["audio"]  # a refused update changes nothing
    session = config.to_session("sess_x")
    assert session["type"] == "realtime" and session["max_output_tokens"] == "inf"
    assert np.isclose(session["audio"]["output"]["speed"], 1.0)
