"""SVG snapshots of the TUI's main screens (pytest-textual-snapshot), against the scripted
realtime server. Update them after an intended change of the screens with
`pytest tests/test_tui_snapshots.py --snapshot-update`, look at the SVGs, and commit them;
docs/tui.md shows the same files."""

from __future__ import annotations

import pytest
from textual.widgets import Input
from tuikit import (
    BlocksSource,
    BrokenSource,
    FakeRealtimeServer,
    Script,
    make_app,
    wait_for,
)

from llamactl.devices import PORTAUDIO_HINT

SIZE = (100, 30)
REASONING = ["The user ", "asks for ", "a sum. ", "Two and ", "two make ", "four."]


def still(pilot) -> None:
    pilot.app.query_one(Input).cursor_blink = False


async def connected(pilot) -> None:
    still(pilot)
    await wait_for(pilot, lambda: pilot.app.status.state in ("listening", "ready"))


async def type_turn(pilot, text: str) -> None:
    pilot.app.query_one(Input).value = text
    await pilot.press("enter")


@pytest.fixture
def fake():
    with FakeRealtimeServer().running() as server:
        yield server


def test_snapshot_main_screen(fake, snap_compare):
    async def run_before(pilot):
        await connected(pilot)

    assert snap_compare(make_app(fake.url), terminal_size=SIZE, run_before=run_before)


def test_snapshot_reasoning_streaming_expanded(fake, snap_compare):
    fake.script = Script(reasoning=REASONING, hold_reasoning=True)

    async def run_before(pilot):
        await connected(pilot)
        await type_turn(pilot, "What is two plus two?")
        await wait_for(pilot, lambda: pilot.app.reasoning.text == "".join(REASONING))
        await pilot.press("ctrl+r")

    assert snap_compare(make_app(fake.url), terminal_size=SIZE, run_before=run_before)


def test_snapshot_conversation_with_skipped_reasoning(fake, snap_compare):
    fake.script = Script(answer=["Hello! ", "How can I help?"])

    async def run_before(pilot):
        app = pilot.app
        await connected(pilot)
        await type_turn(pilot, "Hello!")
        await wait_for(pilot, lambda: app.response_id is None and app.status.state == "listening")
        fake.script = Script(reasoning=REASONING, hold_reasoning=True)
        await type_turn(pilot, "What is two plus two?")
        await wait_for(pilot, lambda: app.reasoning.text == "".join(REASONING))
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: app.reasoning.state == "skipped" and app.response_id is None)
        await pilot.press("ctrl+r")

    assert snap_compare(make_app(fake.url), terminal_size=SIZE, run_before=run_before)


def test_snapshot_push_to_talk_turn(fake, snap_compare):
    source = BlocksSource(n=3)

    async def run_before(pilot):
        app = pilot.app
        await connected(pilot)
        await pilot.press("ctrl+t")
        source.release()
        await wait_for(pilot, lambda: len(fake.of_type("input_audio_buffer.append")) == 3)
        await pilot.press("ctrl+t")
        await wait_for(pilot, lambda: app.response_id is None and app.status.state == "ready")
        app.mic.level(-96.0)  # the meter's last block is not part of the picture

    app = make_app(fake.url, vad=False, source_factory=lambda device: source)
    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_snapshot_errors(snap_compare):
    # a fixed closed port keeps the picture the same on every run
    url = "http://127.0.0.1:9"
    if _listening(9):
        pytest.skip("something listens on port 9 here")

    async def run_before(pilot):
        still(pilot)
        await wait_for(pilot, lambda: pilot.app.status.state == "disconnected")
        await type_turn(pilot, "Is anyone there?")

    app = make_app(url, source_factory=lambda device: BrokenSource(PORTAUDIO_HINT))
    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_snapshot_device_picker(fake, snap_compare):
    async def run_before(pilot):
        await connected(pilot)
        await pilot.press("f2")

    assert snap_compare(make_app(fake.url, device=3), terminal_size=SIZE, run_before=run_before)
