"""The TUI against a live llamactl server on the embedded models (SmolLM2, Whisper tiny.en,
eSpeak NG), started by the TUI's own `LocalServer` exactly as `llamactl tui` does: a typed
turn, a spoken turn from a WAV file standing in for the microphone, and the reasoning skip
key on a template that makes SmolLM2 reason."""

from __future__ import annotations

import asyncio
import wave
from pathlib import Path

import httpx
import pytest
from audiokit import speech, wer
from llamactl.tui.audio import FileSource
from llamactl.tui.local_server import LocalServer, log_path
from llamactl.tui.widgets import ChatLine
from serverkit import THINK_TEMPLATE, hermetic_settings
from tuikit import IdleSource, make_app, wait_for

from llamactl.devices import CountingPlayer

pytestmark = pytest.mark.slow

QUESTION = "What is the capital of France?"
SIZE = (100, 30)
MODEL = "SmolLM2-135M-Instruct.Q4_1"


def lines(app, role: str) -> list[ChatLine]:
    return [line for line in app.query(ChatLine) if line.role == role]


def run(scenario) -> None:
    asyncio.run(asyncio.wait_for(scenario(), timeout=240))


class SpeakerPlayer(CountingPlayer):
    """Asks for spoken answers, keeps the audio."""

    available = True


@pytest.fixture(scope="module")
def server_log(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("tui") / "server.log"


@pytest.fixture(scope="module")
def local(server_log):
    settings = hermetic_settings({"parallel": 2, "threads": 2, "temperature": 0.0})
    server = LocalServer(settings, log_file=server_log)
    url = server.start()
    try:
        yield url
    finally:
        server.stop()
    with pytest.raises(httpx.HTTPError):
        httpx.get(url + "/health", timeout=2)  # stopped with the app


def test_local_server_logs_to_its_file(local, server_log):
    assert httpx.get(local + "/health", timeout=5).status_code == 200
    assert "SmolLM2-135M-Instruct.Q4_1 ready" in server_log.read_text()


def test_default_log_file_is_under_the_xdg_state_dir(isolated_dirs):
    assert log_path() == isolated_dirs.state_home / "llamactl" / "tui-server.log"


def test_typed_turn_gets_an_answer(local):
    async def scenario():
        app = make_app(local, source_factory=lambda device: IdleSource())
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: app.status.state == "listening", timeout=60)
            assert app.status.model == MODEL
            app.query_one("#prompt").value = QUESTION
            await pilot.press("enter")
            await wait_for(pilot, lambda: app.status.latency.first_token is not None, 120)
            answers = lines(app, "assistant")
            assert len(answers) == 1 and "Paris" in answers[0].text
            assert not answers[0].partial
            assert [line.text for line in lines(app, "user")] == [QUESTION]
            assert lines(app, "error") == []

    run(scenario)


def test_spoken_turn_from_a_wav_file(local, tmp_path: Path):
    samples, rate = speech(QUESTION, "en-us+f2")
    wav = tmp_path / "question.wav"
    with wave.open(str(wav), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(samples.astype("<i2").tobytes())
    player = SpeakerPlayer()

    async def scenario():
        app = make_app(
            local,
            source_factory=lambda device: FileSource(wav, speed=0, tail_s=1.5),
            player_factory=lambda: (player, None),
        )
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: app.status.latency.first_audio is not None, 180)
            heard = lines(app, "user")
            assert len(heard) == 1 and not heard[0].partial
            assert wer(QUESTION, heard[0].text) <= 0.3
            answers = lines(app, "assistant")
            assert len(answers) == 1 and answers[0].text.strip()
            assert app.mic.problem == "question.wav ended"
            assert lines(app, "error") == []
        assert len(player.received) > 24000  # over half a second of speech was played

    run(scenario)


def test_skip_key_ends_reasoning_on_a_live_server(tmp_path: Path):
    settings = hermetic_settings(
        {"parallel": 1, "threads": 2, "temperature": 0.0, "chat_template_file": THINK_TEMPLATE}
    )
    with LocalServer(settings, log_file=tmp_path / "server.log") as url:

        async def scenario():
            app = make_app(url, source_factory=lambda device: IdleSource())
            async with app.run_test(size=SIZE) as pilot:
                await wait_for(pilot, lambda: app.status.state == "listening", timeout=60)
                # greedy SmolLM2 reasons about this one for hundreds of tokens
                app.query_one("#prompt").value = "Write a long poem about the sea."
                await pilot.press("enter")
                await wait_for(pilot, lambda: len(app.reasoning.text.split()) >= 3, 120)
                live = app.response_id
                await pilot.press("ctrl+s")
                await wait_for(pilot, lambda: app.reasoning.state == "skipped", 60)
                assert app.control_requests == [live]
                # the model went on to its answer
                await wait_for(
                    pilot,
                    lambda: app.response_id is None or any(x.text for x in lines(app, "assistant")),
                    120,
                )
                if app.response_id is not None:  # a small model may ramble: interrupt it
                    await pilot.press("escape")
                await wait_for(pilot, lambda: app.response_id is None, 60)
                assert lines(app, "assistant")[0].text.strip()  # an answer after the skip
                assert lines(app, "error") == []

        run(scenario)
