"""Stop-string matching and UTF-8-safe streaming without a model."""

from __future__ import annotations

from llamactl.engine.detokenize import IncrementalDetokenizer
from llamactl.engine.stops import StopMatcher


def feed_all(matcher: StopMatcher, pieces: list[str]) -> tuple[list[str], str | None]:
    out = []
    for piece in pieces:
        text, stop = matcher.push(piece)
        out.append(text)
        if stop:
            return out, stop
    out.append(matcher.flush())
    return out, None


def test_stop_string_at_every_split_point():
    text = "Hello world. END and more"
    for i in range(1, len(text)):
        for j in range(i + 1, len(text) + 1):
            pieces = [text[:i], text[i:j], text[j:]]
            out, stop = feed_all(StopMatcher(["END"]), pieces)
            assert stop == "END"
            # nothing of the stop string ever reached the caller, in any piece
            assert "".join(out) == "Hello world. "


def test_partial_stop_is_held_then_released():
    m = StopMatcher(["</answer>"])
    assert m.push("value </ans") == ("value ", None)
    assert m.push("wer is") == ("</answer is", None)
    assert m.flush() == ""


def test_earliest_of_several_stops_wins():
    m = StopMatcher(["bb", "a"])
    assert m.push("xxbba") == ("xx", "bb")


def test_held_text_flushed_at_end():
    m = StopMatcher(["STOP"])
    assert m.push("almost ST") == ("almost ", None)
    assert m.flush() == "ST"


def test_detokenizer_never_splits_a_character():
    emoji = "🦙".encode()
    pieces = {1: emoji[:2], 2: emoji[2:], 3: b" ok"}
    d = IncrementalDetokenizer(pieces.__getitem__)
    assert d.push(1) == ""
    assert d.push(2) == "🦙"
    assert d.push(3) == " ok"
    assert d.flush() == ""


def test_detokenizer_drops_an_incomplete_tail():
    d = IncrementalDetokenizer({1: b"ok", 2: "é".encode()[:1]}.__getitem__)
    assert d.push(1) == "ok"
    assert d.push(2) == ""
    assert d.flush() == ""
