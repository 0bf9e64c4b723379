"""The TUI's pieces without a screen: event parsing, URLs, session config, audio, the command."""

from __future__ import annotations

import base64
import threading
import wave
from pathlib import Path

import numpy as np
import pytest
from llamactl.tui import events as ev
from llamactl.tui.app import latency_from_metadata
from llamactl.tui.audio import FileSource, level_dbfs
from typer.testing import CliRunner

from llamactl.cli.main import app as cli
from llamactl.core.errors import ServerUnreachableError
from llamactl.devices import RATE, CountingPlayer, Player
from llamactl.realtime.client import Endpoint, session_config


@pytest.mark.parametrize(
    ("url", "base"),
    [
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
        ("http://127.0.0.1:8080/", "http://127.0.0.1:8080"),
        ("http://127.0.0.1:8080/v1", "http://127.0.0.1:8080"),
        ("ws://host:9/v1/realtime", "http://host:9"),
        ("wss://host/proxy/v1", "https://host/proxy"),
        ("localhost:8080", "http://localhost:8080"),
    ],
)
def test_endpoint_parse(url, base):
    assert Endpoint.parse(url).base == base


def test_endpoint_routes():
    e = Endpoint.parse("https://example.test/llm/v1")
    assert e.realtime() == "wss://example.test/llm/v1/realtime"
    assert e.realtime("my model") == "wss://example.test/llm/v1/realtime?model=my%20model"
    assert e.control == "https://example.test/llm/v1/chat/completions/control"
    assert Endpoint.parse("http://h:1").realtime() == "ws://h:1/v1/realtime"


@pytest.mark.parametrize("url", ["ftp://host", "http://", ""])
def test_endpoint_refuses_non_urls(url):
    with pytest.raises(ServerUnreachableError, match="not a server URL"):
        Endpoint.parse(url)


def test_session_config_shapes():
    vad = session_config(vad=True, audio_out=True)
    assert vad["type"] == "realtime" and vad["output_modalities"] == ["audio"]
    assert vad["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": 24000}
    assert vad["audio"]["input"]["turn_detection"]["type"] == "server_vad"
    assert vad["audio"]["output"]["format"] == {"type": "audio/pcm", "rate": 24000}
    ptt = session_config(vad=False, audio_out=False, instructions="Be brief.")
    assert ptt["audio"]["input"]["turn_detection"] is None
    assert ptt["output_modalities"] == ["text"] and ptt["instructions"] == "Be brief."


def test_parse_every_event_the_app_uses():
    pcm = b"\x01\x00\x02\x00"
    buf, heard = "input_audio_buffer", "conversation.item.input_audio_transcription"
    cases = {
        "session.created": ({"session": {"model": "m"}}, ev.SessionReady),
        f"{buf}.speech_started": ({"item_id": "i", "audio_start_ms": 5}, ev.SpeechStarted),
        f"{buf}.speech_stopped": ({"item_id": "i", "audio_end_ms": 9}, ev.SpeechStopped),
        f"{buf}.committed": ({"item_id": "i"}, ev.InputCommitted),
        f"{heard}.delta": ({"delta": "hi"}, ev.UserTranscriptDelta),
        f"{heard}.completed": ({"transcript": "hi"}, ev.UserTranscriptDone),
        "response.created": ({"response": {"id": "resp_1"}}, ev.ResponseStarted),
        "response.reasoning.delta": ({"response_id": "r", "delta": "hm"}, ev.ReasoningDelta),
        "response.reasoning_text.delta": ({"delta": "hm"}, ev.ReasoningDelta),
        "response.reasoning.done": ({"text": "hm"}, ev.ReasoningDone),
        "response.output_text.delta": ({"delta": "a"}, ev.AnswerDelta),
        "response.output_audio_transcript.delta": ({"delta": "a"}, ev.AnswerDelta),
        "response.output_audio.delta": ({"delta": base64.b64encode(pcm).decode()}, ev.AudioDelta),
        "output_audio_buffer.cleared": ({"response_id": "r"}, ev.OutputAudioCleared),
        "conversation.item.truncated": ({"item_id": "i", "audio_end_ms": 3}, ev.ItemTruncated),
        "response.done": ({"response": {"id": "r", "status": "cancelled"}}, ev.ResponseFinished),
        "error": ({"error": {"message": "no", "code": "c"}}, ev.ServerError),
        "rate_limits.updated": ({}, ev.Other),
    }  # fmt: skip
    for type_, (fields, cls) in cases.items():
        assert isinstance(ev.parse({"type": type_, **fields}), cls), type_
    assert ev.parse({"type": "response.output_audio.delta", "delta": "AQACAA=="}).pcm == pcm
    spoken = ev.parse({"type": "response.output_audio_transcript.delta", "delta": "x"})
    assert spoken.spoken and not ev.parse({"type": "response.output_text.delta"}).spoken
    done = ev.parse(
        {
            "type": "response.done",
            "response": {
                "id": "r",
                "status": "cancelled",
                "status_details": {"type": "cancelled", "reason": "turn_detected"},
                "metadata": {"first_text_ms": "12"},
            },
        }
    )
    assert (done.status, done.reason, done.metadata) == (
        "cancelled",
        "turn_detected",
        {"first_text_ms": "12"},
    )


def test_parse_is_lenient_with_odd_shapes():
    assert isinstance(ev.parse({}), ev.Other)
    assert isinstance(
        ev.parse({"type": "response.output_audio.delta", "delta": "!!"}), ev.ServerError
    )
    assert ev.parse({"type": "error", "error": "oops"}).message == "unknown server error"
    assert ev.parse({"type": "response.done", "response": None}).status == "completed"
    item = ev.parse(
        {
            "type": "conversation.item.added",
            "item": {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        }
    )
    assert item.role == "user" and item.text == "hi"


def test_latency_from_metadata():
    lat = latency_from_metadata(
        {"transcription_ms": "250", "first_text_ms": "90", "first_audio_ms": "400", "x": "y"}
    )
    assert (lat.transcript, lat.first_token, lat.first_audio) == (0.25, 0.09, 0.4)
    assert latency_from_metadata({}) is None
    assert latency_from_metadata({"note": "hello"}) is None


def test_level_meter():
    assert level_dbfs(np.zeros(100, np.int16)) == -96.0
    assert level_dbfs(np.zeros(0, np.int16)) == -96.0
    full = np.full(100, 32767, np.int16)
    assert level_dbfs(full) == pytest.approx(0.0, abs=0.01)
    half = np.full(100, 16384, np.int16)
    assert level_dbfs(half) == pytest.approx(-6.02, abs=0.05)


def test_player_reports_what_was_heard_and_drops_the_rest():
    player = Player()
    player.play("item_1", b"\x00\x00" * RATE)  # one second queued
    assert player.busy
    player._take(2 * RATE // 4)  # a quarter of it played
    assert player.clear() == ("item_1", 250)
    assert not player.busy
    player.play("item_2", b"\x00\x00" * 10)
    assert player.clear() == ("item_2", 0)  # a new item starts from zero
    counting = CountingPlayer()
    counting.play("a", b"\x01\x00" * 4)
    assert bytes(counting.received) == b"\x01\x00" * 4 and not counting.busy


def _wav(path: Path, seconds: float, rate: int = 16000) -> Path:
    t = np.arange(int(seconds * rate)) / rate
    tone = (0.3 * 32767 * np.sin(2 * np.pi * 300 * t)).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(tone.tobytes())
    return path


def test_file_source_resamples_adds_silence_and_ends(tmp_path):
    source = FileSource(_wav(tmp_path / "tone.wav", 0.5), speed=0, tail_s=0.25)
    assert not source.live
    blocks: list[np.ndarray] = []
    ended = threading.Event()
    source.start(blocks.append, ended.set)
    assert ended.wait(10)
    audio = np.concatenate(blocks)
    assert audio.dtype == np.int16 and audio.size == int(0.75 * RATE)
    assert level_dbfs(audio[: RATE // 4]) > -20 and level_dbfs(audio[-RATE // 5 :]) == -96.0


def test_file_source_errors_are_audio_device_errors(tmp_path):
    from llamactl.core.errors import AudioDeviceError

    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"not audio at all")
    with pytest.raises(AudioDeviceError, match="cannot read"):
        FileSource(bad).start(lambda b: None, lambda: None)


def test_cli_help_lists_keys():
    result = CliRunner().invoke(cli, ["tui", "--help"])
    assert result.exit_code == 0
    assert "--url" in result.output and "ctrl+s skip reasoning" in result.output


def test_cli_needs_a_terminal():
    result = CliRunner().invoke(cli, ["tui", "--url", "http://127.0.0.1:9"])
    assert result.exit_code == 1
    assert "needs a terminal" in result.output


def test_no_portaudio_means_text_answers(monkeypatch):
    from llamactl.core.errors import AudioDeviceError
    from llamactl.devices import PORTAUDIO_HINT, playback

    def missing():
        raise AudioDeviceError(PORTAUDIO_HINT)

    monkeypatch.setattr(playback, "sounddevice_module", missing)
    player, why = playback.open_player()
    assert not player.available
    assert why.startswith("sound output needs the PortAudio library")


def test_sound_device_player_feeds_the_callback_and_pads_with_silence():
    from llamactl.devices import SoundDevicePlayer

    class Stream:
        def __init__(self, **kwargs):
            self.kwargs = kwargs
            self.started = self.closed = False

        def start(self):
            self.started = True

        def stop(self):
            pass

        def close(self):
            self.closed = True

    made: list[Stream] = []
    player = SoundDevicePlayer(factory=lambda **kw: made.append(Stream(**kw)) or made[-1])
    stream = made[0]
    assert stream.started and stream.kwargs["samplerate"] == RATE
    player.play("item", b"\x01\x00" * 3)
    out = bytearray(8)
    stream.kwargs["callback"](out, 4, None, None)
    assert bytes(out) == b"\x01\x00" * 3 + b"\x00\x00"
    assert player.clear() == ("item", 0)  # 3 samples at 24 kHz round down to 0 ms
    player.close()
    assert stream.closed


@pytest.mark.slow
def test_local_server_that_cannot_load_its_model_says_why(tmp_path):
    from llamactl.tui.local_server import LocalServer
    from serverkit import hermetic_settings

    from llamactl.core.errors import LocalServerError

    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF but not really")
    server = LocalServer(hermetic_settings({}), model_path=bad, log_file=tmp_path / "log")
    with pytest.raises(LocalServerError, match="could not load the model"):
        server.start(timeout=60)
    assert server._thread is None  # stopped


def test_an_event_the_tui_does_not_act_on_is_kept_with_its_fields():
    from llamactl.tui import events as tui_events

    from llamactl.realtime import protocol

    data = {"type": "conversation.item.done", "event_id": "e1", "item": {"id": "i1"}}
    record = tui_events.of(protocol.read_server_event(data))
    assert isinstance(record, tui_events.Other) and record.type == "conversation.item.done"
    assert record.raw["event_id"] == "e1"
