"""Streaming reasoning/content splitting: markers cut anywhere, nothing half-emitted."""

from __future__ import annotations

import itertools

import pytest

from llamactl.engine.chat import (
    THINK,
    ChatDelta,
    OutputPipeline,
    PlainTextParser,
    ReasoningParser,
    ThinkingMarkers,
    coalesce,
    output_parser,
    prompt_opens_reasoning,
    split_reasoning,
)
from llamactl.engine.types import ContentDelta, ReasoningDelta

GPT_OSS = ThinkingMarkers(
    "<|channel|>analysis<|message|>",
    "<|end|>",
    ("<|start|>assistant<|channel|>final<|message|>", "<|channel|>final<|message|>"),
    family="gpt-oss",
)
FAMILIES = [
    THINK,
    ThinkingMarkers("[THINK]", "[/THINK]"),
    ThinkingMarkers("<seed:think>", "</seed:think>"),
    ThinkingMarkers("<|START_THINKING|>", "<|END_THINKING|>", ("<|START_RESPONSE|>",)),
    ThinkingMarkers("<|open|>think<|sep|>", "<|close|>think<|sep|>", ("<|open|>response<|sep|>",)),
    GPT_OSS,
]


def run(parser: ReasoningParser, chunks: list[str]) -> list[ChatDelta]:
    events = [event for chunk in chunks for event in parser.feed(chunk)]
    return events + parser.finish()


def joined(events: list[ChatDelta]) -> tuple[str, str]:
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    content = "".join(e.text for e in events if isinstance(e, ContentDelta))
    return reasoning, content


def assert_well_formed(events: list[ChatDelta]) -> None:
    assert all(event.text for event in events), "no empty deltas"
    kinds = [type(event) for event in events]
    # Reasoning comes first, then content: never back again.
    assert kinds == sorted(kinds, key=lambda kind: kind is ContentDelta)


def splits(text: str, pieces: int) -> list[list[str]]:
    """Every way of cutting `text` into `pieces` consecutive chunks (empty ones allowed)."""
    cuts = itertools.combinations_with_replacement(range(len(text) + 1), pieces - 1)
    result = []
    for points in cuts:
        bounds = (0, *points, len(text))
        result.append([text[a:b] for a, b in itertools.pairwise(bounds)])
    return result


# Whole-text splitting


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<think>\nLet me see.\n</think>\n\nHello!", ("Let me see.", "Hello!")),
        ("<think></think>Hello", ("", "Hello")),
        ("<think>\n\n</think>\n\nHello", ("", "Hello")),
        ("  \n<think>x</think>y", ("x", "y")),
        ("Hello <think>not reasoning</think>", ("", "Hello <think>not reasoning</think>")),
        ("No markers at all.", ("", "No markers at all.")),
        ("<think>cut off by max_tokens", ("cut off by max_tokens", "")),
        ("<think>a</think>b</think>c", ("a", "b</think>c")),
        ("<b>bold</b>", ("", "<b>bold</b>")),
        ("<thi", ("", "<thi")),
        ("<think>abc</th", ("abc</th", "")),
        ("", ("", "")),
    ],
)
def test_split_reasoning(text: str, expected: tuple[str, str]) -> None:
    assert split_reasoning(text) == expected


def test_split_reasoning_when_the_prompt_opened_the_block() -> None:
    assert split_reasoning("\nHmm.\n</think>\n\nAnswer", starts_in_reasoning=True) == (
        "Hmm.",
        "Answer",
    )
    assert split_reasoning("never closed", starts_in_reasoning=True) == ("never closed", "")


def test_content_keeps_its_own_whitespace_when_there_is_no_reasoning() -> None:
    assert split_reasoning("  \n  indented code") == ("", "  \n  indented code")


def test_whitespace_inside_reasoning_is_kept() -> None:
    assert split_reasoning("<think>one\n\ntwo  three\n</think>x") == ("one\n\ntwo  three", "x")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "<|channel|>analysis<|message|>Think.<|end|>"
            "<|start|>assistant<|channel|>final<|message|>Answer",
            ("Think.", "Answer"),
        ),
        ("<|channel|>final<|message|>Answer", ("", "Answer")),
        ("Plain", ("", "Plain")),
        (
            "<|channel|>analysis<|message|>T<|end|>"
            "<|start|>assistant<|channel|>commentary to=functions.f",
            ("T", "<|start|>assistant<|channel|>commentary to=functions.f"),
        ),
    ],
)
def test_content_headers_are_dropped(text: str, expected: tuple[str, str]) -> None:
    assert split_reasoning(text, GPT_OSS) == expected


# Streaming: markers cut at every boundary


STREAM_TEXT = "<think>\nStep 1, <then> 2.\n</think>\n\nThe answer is <42>."
STREAM_EXPECTED = ("Step 1, <then> 2.", "The answer is <42>.")


def test_every_single_split_point() -> None:
    for chunks in splits(STREAM_TEXT, 2):
        events = run(ReasoningParser(), chunks)
        assert joined(events) == STREAM_EXPECTED, chunks
        assert_well_formed(events)


def test_every_pair_of_split_points() -> None:
    for chunks in splits(STREAM_TEXT, 3):
        events = run(ReasoningParser(), chunks)
        assert joined(events) == STREAM_EXPECTED, chunks
        assert_well_formed(events)


def test_character_by_character() -> None:
    events = run(ReasoningParser(), list(STREAM_TEXT))
    assert joined(events) == STREAM_EXPECTED
    assert_well_formed(events)


@pytest.mark.parametrize("markers", FAMILIES, ids=lambda m: m.start)
def test_every_family_at_every_split_point(markers: ThinkingMarkers) -> None:
    header = markers.content_prefixes[0] if markers.content_prefixes else ""
    text = f"{markers.start}\nReason < a bit.\n{markers.end}{header}\nAnswer [x] <y>."
    for chunks in [*splits(text, 2), list(text)]:
        events = run(ReasoningParser.from_markers(markers), chunks)
        assert joined(events) == ("Reason < a bit.", "Answer [x] <y>."), chunks
        assert_well_formed(events)


def test_partial_markers_never_leak_while_streaming() -> None:
    """What has been emitted at any moment is a prefix of the final split, so no piece of a
    marker (or whitespace due to be trimmed) ever went out early."""
    for chunks in splits(STREAM_TEXT, 3):
        parser = ReasoningParser()
        seen: list[ChatDelta] = []
        for chunk in chunks:
            seen += parser.feed(chunk)
            reasoning, content = joined(seen)
            assert STREAM_EXPECTED[0].startswith(reasoning), chunks
            assert STREAM_EXPECTED[1].startswith(content), chunks


def test_text_is_released_as_soon_as_it_cannot_be_a_marker() -> None:
    parser = ReasoningParser()
    assert parser.feed("Hel") == [ContentDelta("Hel")]
    assert parser.feed("lo <th") == [ContentDelta("lo <th")]  # already in content: no markers
    parser = ReasoningParser()
    assert parser.feed("<th") == []
    assert parser.feed("is") == [ContentDelta("<this")]
    parser = ReasoningParser()
    assert parser.feed("<think>abc</") == [ReasoningDelta("abc")]
    assert parser.feed("b>") == [ReasoningDelta("</b>")]
    assert parser.in_reasoning


def test_whitespace_before_the_end_marker_is_held_then_dropped() -> None:
    parser = ReasoningParser()
    assert parser.feed("<think>a\n") == [ReasoningDelta("a")]
    assert parser.feed("\n") == []
    assert parser.feed("b") == [ReasoningDelta("\n\nb")]
    assert parser.feed("\n</think>\n\n") == []
    assert not parser.in_reasoning
    assert parser.feed("  ") == []
    assert parser.feed("Hi ") == [ContentDelta("Hi ")]
    assert parser.finish() == []


def test_one_feed_can_hold_both_kinds() -> None:
    parser = ReasoningParser()
    assert parser.feed("<think>r</think>c") == [ReasoningDelta("r"), ContentDelta("c")]


def test_starts_in_reasoning_streaming() -> None:
    text = "\nI should greet.\n</think>\n\nHello!"
    for chunks in [*splits(text, 2), list(text)]:
        events = run(ReasoningParser(starts_in_reasoning=True), chunks)
        assert joined(events) == ("I should greet.", "Hello!"), chunks
        assert_well_formed(events)


def test_whitespace_only_output() -> None:
    assert joined(run(ReasoningParser(), [" ", "\n"])) == ("", " \n")


def test_choice_index_is_carried() -> None:
    parser = ReasoningParser(index=2)
    events = run(parser, ["<think>r</think>", "c"])
    assert events == [ReasoningDelta("r", 2), ContentDelta("c", 2)]


def test_empty_markers_are_refused() -> None:
    with pytest.raises(ValueError):
        ReasoningParser("", "</think>")


# The prompt helper, coalescing and the stage pipeline


@pytest.mark.parametrize(
    ("prompt", "opens"),
    [
        ("<|im_start|>assistant\n<think>\n", True),
        ("<｜Assistant｜><think>", True),
        ("<|im_start|>assistant\n<think>\n\n</think>\n\n", False),
        ("<|im_start|>assistant\n", False),
        ("user said <think> earlier<|im_start|>assistant\n", False),
    ],
)
def test_prompt_opens_reasoning(prompt: str, opens: bool) -> None:
    assert prompt_opens_reasoning(prompt, THINK) is opens
    assert prompt_opens_reasoning(prompt, None) is False


def test_coalesce_merges_neighbours_of_one_kind_and_choice() -> None:
    events = [
        ReasoningDelta("a"),
        ReasoningDelta(""),
        ReasoningDelta("b"),
        ContentDelta("c"),
        ContentDelta("d", 1),
        ContentDelta("e", 1),
    ]
    assert coalesce(events) == [ReasoningDelta("ab"), ContentDelta("c"), ContentDelta("de", 1)]


def test_output_parser_picks_the_right_first_stage() -> None:
    assert isinstance(output_parser(None, "<think>\n"), PlainTextParser)
    opened = output_parser(THINK, "<|im_start|>assistant\n<think>\n")
    assert isinstance(opened, ReasoningParser) and opened.in_reasoning
    closed = output_parser(THINK, "<|im_start|>assistant\n")
    assert isinstance(closed, ReasoningParser) and not closed.in_reasoning


class ShoutStage:
    """A stand-in for a later stage (e.g. tool calls): rewrites content, holds the last delta."""

    def __init__(self) -> None:
        self.held: list[ChatDelta] = []

    def push(self, delta: ChatDelta) -> list[ChatDelta]:
        if isinstance(delta, ContentDelta):
            delta = ContentDelta(delta.text.upper(), delta.index)
        released, self.held = self.held, [delta]
        return released

    def finish(self) -> list[ChatDelta]:
        released, self.held = self.held, []
        return released


def test_pipeline_chains_stages_and_flushes_in_order() -> None:
    pipeline = OutputPipeline(ReasoningParser(), ShoutStage(), ShoutStage())
    events = []
    for chunk in ["<think>hm", "m</think>", "an", "swer"]:
        events += pipeline.feed(chunk)
    events += pipeline.finish()
    assert coalesce(events) == [ReasoningDelta("hmm"), ContentDelta("ANSWER")]


def test_plain_text_parser_passes_everything_through() -> None:
    parser = PlainTextParser()
    assert parser.feed("<think>x") == [ContentDelta("<think>x")]
    assert parser.feed("") == []
    assert parser.finish() == []
