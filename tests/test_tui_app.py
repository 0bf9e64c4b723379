"""The TUI driven by Textual's Pilot against a scripted realtime server (tests/tuikit.py)."""

from __future__ import annotations

import asyncio

import pytest
from llamactl.tui.widgets import ChatLine
from textual.widgets import Input, OptionList
from tuikit import (
    BlocksSource,
    BrokenSource,
    FakeRealtimeServer,
    HeldPlayer,
    Script,
    closed_port_url,
    make_app,
    wait_for,
)

from llamactl.devices import PORTAUDIO_HINT

SIZE = (100, 30)


def lines(app, role: str) -> list[str]:
    return [line.text for line in app.query(ChatLine) if line.role == role]


def run(scenario) -> None:
    asyncio.run(asyncio.wait_for(scenario(), timeout=60))


async def connected(pilot) -> None:
    await wait_for(pilot, lambda: pilot.app.status.state in ("listening", "ready"))


async def type_turn(pilot, text: str) -> None:
    pilot.app.query_one(Input).value = text
    await pilot.press("enter")


@pytest.fixture
def fake():
    with FakeRealtimeServer().running() as server:
        yield server


def test_typing_a_turn_streams_the_answer_and_latencies(fake):
    async def scenario():
        app = make_app(fake.url)
        async with app.run_test(size=SIZE) as pilot:
            await connected(pilot)
            assert app.status.model == "fake-model"
            await type_turn(pilot, "What is two plus two?")
            await wait_for(pilot, lambda: app.status.latency.first_token is not None)
            assert lines(app, "user") == ["What is two plus two?"]
            assert lines(app, "assistant") == ["Two plus two is four."]
            # the server's own figures (response.done metadata) are shown
            assert app.status.latency.describe() == (
                "transcript 0.31 s · first token 0.12 s · first audio 0.45 s"
            )
            assert app.query_one(Input).value == ""
        created = fake.of_type("conversation.item.create")
        assert created[0]["item"]["content"] == [
            {"type": "input_text", "text": "What is two plus two?"}
        ]
        assert fake.types().index("response.create") > fake.types().index(
            "conversation.item.create"
        )
        update = fake.of_type("session.update")[0]["session"]
        assert update["type"] == "realtime"
        assert update["output_modalities"] == ["text"]  # no sound output: text answers
        assert update["audio"]["input"]["turn_detection"]["type"] == "server_vad"

    run(scenario)


def test_skip_key_ends_reasoning_of_the_live_response(fake):
    fake.script = Script(reasoning=["Let me ", "add the ", "numbers."], hold_reasoning=True)

    async def scenario():
        app = make_app(fake.url)
        async with app.run_test(size=SIZE) as pilot:
            await connected(pilot)
            pane = app.reasoning
            assert pane.collapsed  # collapsed by default
            await type_turn(pilot, "What is two plus two?")
            await wait_for(pilot, lambda: pane.text == "Let me add the numbers.")
            assert pane.state == "streaming"
            assert "ctrl+s skips" in pane.title
            live = app.response_id
            assert live is not None
            await pilot.press("ctrl+s")
            await wait_for(pilot, lambda: lines(app, "assistant") == ["Two plus two is four."])
            await wait_for(pilot, lambda: pane.state == "skipped")
            assert pane.title == "Reasoning (skipped after 5 words)"
            answer = [x for x in app.query(ChatLine) if x.role == "assistant"][0]
            await wait_for(pilot, lambda: answer.note == "reasoning skipped")
            assert pane.collapsed  # skipping does not open the pane
        assert fake.controls == [{"id": live, "action": "reasoning_end"}]
        assert live == "resp_" + live.split("_")[1]  # the id the server sent in response.created

    run(scenario)


def test_reasoning_pane_expands_and_collapses(fake):
    fake.script = Script(reasoning=["Thinking ", "hard."])

    async def scenario():
        app = make_app(fake.url)
        async with app.run_test(size=SIZE) as pilot:
            await connected(pilot)
            await type_turn(pilot, "hi")
            await wait_for(pilot, lambda: app.reasoning.state == "done")
            assert app.reasoning.title == "Reasoning (2 words)"
            await pilot.press("ctrl+r")
            assert not app.reasoning.collapsed
            assert app.reasoning.body.visible
            await pilot.press("ctrl+r")
            assert app.reasoning.collapsed

    run(scenario)


def test_skip_key_without_reasoning_sends_nothing(fake):
    async def scenario():
        app = make_app(fake.url)
        async with app.run_test(size=SIZE) as pilot:
            await connected(pilot)
            await pilot.press("ctrl+s")
            await pilot.pause(0.1)
            assert app.reasoning.state == "idle"
        assert fake.controls == []

    run(scenario)


def test_a_refused_skip_keeps_the_reasoning_streaming(fake):
    fake.script = Script(reasoning=["a ", "b"], hold_reasoning=True, control_enabled=False)

    async def scenario():
        app = make_app(fake.url)
        async with app.run_test(size=SIZE) as pilot:
            await connected(pilot)
            await type_turn(pilot, "hi")
            await wait_for(pilot, lambda: app.reasoning.text == "a b")
            await pilot.press("ctrl+s")
            await wait_for(pilot, lambda: len(fake.controls) == 1)
            await wait_for(pilot, lambda: app.reasoning.state == "streaming")
            fake.finish_reasoning(app.response_id)  # the model ends it by itself
            await wait_for(pilot, lambda: app.reasoning.state == "done")
            assert lines(app, "assistant") == ["Two plus two is four."]

    run(scenario)


def test_push_to_talk_sends_audio_then_commit_and_shows_transcript(fake):
    source = BlocksSource(n=4)

    async def scenario():
        app = make_app(fake.url, vad=False, source_factory=lambda device: source)
        async with app.run_test(size=SIZE) as pilot:
            await connected(pilot)
            assert app.mic.mode == "PTT" and not app.mic.active
            await pilot.press("ctrl+t")
            assert app.mic.active
            source.release()
            await wait_for(pilot, lambda: len(fake.of_type("input_audio_buffer.append")) == 4)
            await pilot.press("ctrl+t")
            await wait_for(pilot, lambda: lines(app, "assistant") == ["Two plus two is four."])
            assert lines(app, "user") == ["What is two plus two?"]
            assert app.mic.db > -30  # the meter saw the tone
        types = [t for t in fake.types() if t != "session.update"]
        assert types == ["input_audio_buffer.clear"] + ["input_audio_buffer.append"] * 4 + [
            "input_audio_buffer.commit",
            "response.create",
        ]
        assert (
            fake.of_type("session.update")[0]["session"]["audio"]["input"]["turn_detection"] is None
        )

    run(scenario)


def test_f3_cycles_server_vad_semantic_vad_and_push_to_talk(fake):
    async def scenario():
        app = make_app(fake.url)
        async with app.run_test(size=SIZE) as pilot:
            await connected(pilot)
            assert app.mic.mode == "VAD" and app.mic.active
            assert app.status.turn == "server VAD"
            await pilot.press("f3")
            assert app.mic.mode == "SEM" and app.mic.active
            assert app.status.turn == "semantic VAD (auto)"
            await wait_for(pilot, lambda: len(fake.of_type("session.update")) == 2)
            await pilot.press("f3")
            assert app.mic.mode == "PTT" and not app.mic.active
            assert app.status.turn == "push to talk"
            await wait_for(pilot, lambda: len(fake.of_type("session.update")) == 3)
            await pilot.press("ctrl+t")  # start talking
            assert app.mic.active
            await pilot.press("f3")
            assert app.mic.mode == "VAD" and app.status.turn == "server VAD"
            await wait_for(pilot, lambda: len(fake.of_type("session.update")) == 4)
        updates = [
            u["session"]["audio"]["input"]["turn_detection"] for u in fake.of_type("session.update")
        ]
        assert updates[1] == {"type": "semantic_vad", "eagerness": "auto"}
        assert updates[2] is None
        assert updates[3]["type"] == "server_vad"

    run(scenario)


def test_a_refused_semantic_vad_leaves_the_mode_in_force_on_the_status_bar():
    """A server without Smart Turn refuses semantic_vad: the bar shows server VAD again, the
    mode the session kept, not the one asked for."""
    with FakeRealtimeServer(Script(refuse_semantic=True)).running() as server:

        async def scenario():
            app = make_app(server.url)
            async with app.run_test(size=SIZE) as pilot:
                await connected(pilot)
                await wait_for(pilot, lambda: len(server.of_type("session.update")) == 1)
                await pilot.pause(0.2)
                await pilot.press("f3")
                await wait_for(pilot, lambda: len(server.of_type("session.update")) == 2)
                await wait_for(pilot, lambda: app.status.turn == "server VAD")
                assert app.mic.mode == "VAD" and app.turn == "server"
                assert any("Smart Turn" in line for line in lines(app, "error"))

        run(scenario)


def test_the_turn_mode_and_eagerness_given_at_start(fake):
    async def scenario():
        app = make_app(fake.url, turn="semantic", eagerness="high")
        async with app.run_test(size=SIZE) as pilot:
            await connected(pilot)
            assert app.mic.mode == "SEM" and app.status.turn == "semantic VAD (high)"
        first = fake.of_type("session.update")[0]["session"]["audio"]["input"]["turn_detection"]
        assert first == {"type": "semantic_vad", "eagerness": "high"}

    run(scenario)


def test_escape_interrupts_and_truncates_what_was_heard(fake):
    fake.script = Script(answer=["Once upon ", "a time"], hold_answer=True, audio_ms=300)

    async def scenario():
        app = make_app(fake.url, player_factory=lambda: (HeldPlayer(), None))
        async with app.run_test(size=SIZE) as pilot:
            await connected(pilot)
            await type_turn(pilot, "Tell me a story")
            await wait_for(pilot, lambda: app.player.busy and app.status.state == "speaking")
            item = app.player._item
            await pilot.press("escape")
            await wait_for(pilot, lambda: app.response_id is None)
            assert not app.player.busy
            answer = [line for line in app.query(ChatLine) if line.role == "assistant"][0]
            assert answer.text == "Once upon " and answer.note == "interrupted"
        assert fake.of_type("response.cancel")
        truncate = fake.of_type("conversation.item.truncate")
        assert truncate and truncate[0]["item_id"] == item and truncate[0]["audio_end_ms"] == 0
        assert fake.of_type("session.update")[0]["session"]["output_modalities"] == ["audio"]

    run(scenario)


def test_speaking_over_the_answer_stops_it_and_the_transcript_forms(fake):
    fake.script = Script(answer=["Once upon ", "a time"], hold_answer=True, audio_ms=300)

    async def scenario():
        app = make_app(fake.url, player_factory=lambda: (HeldPlayer(), None))
        async with app.run_test(size=SIZE) as pilot:
            await connected(pilot)
            await type_turn(pilot, "Tell me a story")
            await wait_for(pilot, lambda: app.player.busy)
            # the server's VAD hears the user: the sound stops at once
            fake.push("input_audio_buffer.speech_started", item_id="item_u", audio_start_ms=0)
            await wait_for(pilot, lambda: app.status.state == "hearing you")
            assert not app.player.busy
            heard = lines(app, "user")
            assert heard == ["Tell me a story", ""]
            partial = [x for x in app.query(ChatLine) if x.role == "user"][-1]
            assert partial.partial
            delta = "conversation.item.input_audio_transcription.delta"
            fake.push(delta, item_id="item_u", content_index=0, delta="Stop ")
            fake.push(delta, item_id="item_u", content_index=0, delta="please")
            await wait_for(pilot, lambda: partial.text == "Stop please")
            assert partial.partial
            fake.push(
                "conversation.item.input_audio_transcription.completed",
                item_id="item_u",
                content_index=0,
                transcript="Stop please.",
            )
            await wait_for(pilot, lambda: not partial.partial)
            assert partial.text == "Stop please."

    run(scenario)


def test_escape_with_nothing_playing_is_harmless(fake):
    async def scenario():
        app = make_app(fake.url)
        async with app.run_test(size=SIZE) as pilot:
            await connected(pilot)
            await pilot.press("escape")
            await pilot.pause(0.1)
        assert "response.cancel" not in fake.types()

    run(scenario)


def test_server_unreachable_is_shown_not_raised():
    async def scenario():
        app = make_app(closed_port_url())
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: app.status.state == "disconnected")
            errors = lines(app, "error")
            assert len(errors) == 1 and errors[0].startswith("cannot reach the server at")
            await type_turn(pilot, "hello?")
            assert lines(app, "error")[-1] == "Not connected to a server: /reset reconnects."

    run(scenario)


def test_wrong_api_key_is_shown():
    async def scenario():
        with FakeRealtimeServer(api_key="right").running() as server:
            app = make_app(server.url, api_key="wrong")
            async with app.run_test(size=SIZE) as pilot:
                await wait_for(pilot, lambda: app.status.state == "disconnected")
                assert "refused the API key" in lines(app, "error")[0]

    run(scenario)


def test_the_right_api_key_is_sent_everywhere():
    async def scenario():
        script = Script(reasoning=["x"], hold_reasoning=True)
        with FakeRealtimeServer(script, api_key="right").running() as server:
            app = make_app(server.url, api_key="right")
            async with app.run_test(size=SIZE) as pilot:
                await connected(pilot)
                await type_turn(pilot, "hi")
                await wait_for(pilot, lambda: app.reasoning.state == "streaming")
                await pilot.press("ctrl+s")
                await wait_for(pilot, lambda: app.reasoning.state == "skipped")

    run(scenario)


@pytest.mark.parametrize(
    "message",
    [
        PORTAUDIO_HINT,
        "could not record from the default input device: no device (see --list-devices)",
    ],
    ids=["portaudio-missing", "no-microphone"],
)
def test_microphone_errors_are_shown_and_typing_still_works(fake, message):
    async def scenario():
        app = make_app(fake.url, source_factory=lambda device: BrokenSource(message))
        async with app.run_test(size=SIZE) as pilot:
            await connected(pilot)
            assert lines(app, "error") == [
                f"No microphone: {message}. Type your messages instead; f2 picks a device."
            ]
            assert app.mic.problem == "no microphone: type below, or f2 picks one"
            assert app.status.state == "ready"
            await pilot.press("ctrl+t")  # tries the mic again: same error, no crash
            assert len(lines(app, "error")) == 2
            await type_turn(pilot, "typed instead")
            await wait_for(pilot, lambda: lines(app, "assistant") == ["Two plus two is four."])

    run(scenario)


def test_reset_clears_the_screen_and_starts_a_new_session(fake):
    async def scenario():
        app = make_app(fake.url)
        async with app.run_test(size=SIZE) as pilot:
            await connected(pilot)
            await type_turn(pilot, "first")
            await wait_for(pilot, lambda: len(lines(app, "assistant")) == 1)
            await type_turn(pilot, "/reset")
            await wait_for(pilot, lambda: fake.connections == 2)
            await connected(pilot)
            assert lines(app, "user") == [] and lines(app, "assistant") == []
            assert lines(app, "system") == ["New conversation."]
            assert app.status.latency.first_token is None

    run(scenario)


def test_help_and_unknown_commands(fake):
    async def scenario():
        app = make_app(fake.url)
        async with app.run_test(size=SIZE) as pilot:
            await connected(pilot)
            await type_turn(pilot, "/help")
            assert "ctrl+s ends the model's reasoning now" in lines(app, "system")[-1]
            await type_turn(pilot, "/nope")
            assert lines(app, "error")[-1] == "Unknown command /nope: try /help."
            await type_turn(pilot, "/quit")
            await pilot.pause(0.1)
        assert app.return_code == 0

    run(scenario)


def test_device_picker_switches_the_microphone(fake):
    opened: list[int | None] = []

    def factory(device):
        from tuikit import IdleSource

        opened.append(device)
        return IdleSource()

    async def scenario():
        app = make_app(fake.url, device=None, source_factory=factory)
        async with app.run_test(size=SIZE) as pilot:
            await connected(pilot)
            await pilot.press("f2")
            options = app.screen.query_one(OptionList)
            assert options.option_count == 3  # system default + two devices
            await pilot.press("down", "down", "enter")
            await pilot.pause(0.05)
            assert app.device == 3
            await pilot.press("f2", "escape")
            assert app.device == 3
        assert opened == [None, 3]

    run(scenario)


def test_device_picker_without_portaudio_says_why(fake):
    from textual.widgets import Label

    from llamactl.core.errors import AudioDeviceError

    def no_portaudio():
        raise AudioDeviceError(PORTAUDIO_HINT)

    async def scenario():
        app = make_app(fake.url, list_devices=no_portaudio)
        async with app.run_test(size=SIZE) as pilot:
            await connected(pilot)
            await pilot.press("f2")
            await pilot.pause(0.05)
            label = app.screen.query_one(Label)
            assert str(label.render()).startswith("No input devices: microphone input needs")
            await pilot.press("escape")
            assert app.screen is app.screen_stack[0]

    run(scenario)


def test_page_keys_scroll_the_history_while_typing(fake):
    async def scenario():
        app = make_app(fake.url)
        async with app.run_test(size=SIZE) as pilot:
            await connected(pilot)
            for i in range(40):
                app.say("system", f"note {i}")
            await pilot.pause(0.1)
            history = app.history
            assert history.max_scroll_y > 0 and history.scroll_y == history.max_scroll_y
            await pilot.press("pageup")
            assert history.scroll_y < history.max_scroll_y
            await pilot.press("pagedown", "pagedown")
            assert history.scroll_y == history.max_scroll_y
            assert app.focused is app.query_one(Input)

    run(scenario)


def test_ctrl_q_quits_and_stops_the_microphone(fake):
    async def scenario():
        app = make_app(fake.url)
        async with app.run_test(size=SIZE) as pilot:
            await connected(pilot)
            source = app.source
            assert source is not None and source.running
            await pilot.press("ctrl+q")
        assert not source.running

    run(scenario)


def test_a_reasoning_budget_is_sent_with_the_session_and_shown(fake):
    async def scenario():
        app = make_app(fake.url, reasoning_budget=48)
        async with app.run_test(size=(140, 30)) as pilot:
            await connected(pilot)
            shown = str(app.status.render())
            assert "thinking ≤ 48 tokens" in shown
        update = fake.of_type("session.update")[0]["session"]
        assert update["reasoning_budget"] == 48

    asyncio.run(scenario())
    plain = make_app(fake.url)
    assert plain.reasoning_budget is None  # the server's own budget, nothing shown
