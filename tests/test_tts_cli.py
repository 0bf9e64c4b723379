"""`llamactl tts`: to a file, to stdout, from stdin, and playback (into a fake stream)."""

from __future__ import annotations

import io
import sys
import wave

import av
import numpy as np
import pytest
from typer.testing import CliRunner

from llamactl.cli import tts as tts_cli
from llamactl.cli.main import app

TEXT = "Please send the report to my office before noon on Friday."


def _run(*args: str, input: str | None = None):
    return CliRunner().invoke(app, ["tts", *args], input=input)


def _wav(data: bytes) -> tuple[np.ndarray, int]:
    with wave.open(io.BytesIO(data)) as w:
        return np.frombuffer(w.readframes(w.getnframes()), "<i2"), w.getframerate()


def test_to_a_wav_file(tmp_path):
    out = tmp_path / "speech.wav"
    result = _run(TEXT, "-o", str(out))
    assert result.exit_code == 0, result.output
    samples, rate = _wav(out.read_bytes())
    assert rate == 22050 and samples.size / rate > 2
    assert np.abs(samples).max() > 5000


def test_flac_from_the_suffix(tmp_path):
    out = tmp_path / "speech.flac"
    assert _run(TEXT, "-o", str(out), "--speed", "1.5").exit_code == 0
    with av.open(str(out)) as container:
        assert container.format.name == "flac"
        assert container.streams.audio[0].rate == 22050


def test_stdin_text_to_stdout():
    result = _run(input=TEXT)  # CliRunner's stdout is not a terminal: audio goes there
    assert result.exit_code == 0
    samples, rate = _wav(result.stdout_bytes)
    assert samples.size / rate > 2
    pcm = _run("Hi.", "--format", "pcm").stdout_bytes
    assert 0 < len(pcm) < samples.size  # half the bytes of a much shorter text


def test_list_voices():
    result = _run("--list-voices")
    assert result.exit_code == 0
    assert any(line.split()[0] == "en-us" for line in result.output.splitlines())


def test_bad_voice_and_empty_text():
    result = _run("hello", "--voice", "no-such-voice", "--format", "pcm")
    assert result.exit_code == 1 and "unknown voice" in result.output
    assert _run(input="   ").exit_code == 1


class _FakeStream:
    def __init__(self, **kwargs) -> None:
        self.kwargs, self.blocks, self.state = kwargs, [], "new"

    def start(self) -> None:
        self.state = "started"

    def write(self, data: bytes) -> None:
        self.blocks.append(data)

    def stop(self) -> None:
        self.state = "stopped"

    def close(self) -> None:
        self.state = "closed"


def test_play_writes_chunks_to_the_output_stream(monkeypatch, tmp_path):
    streams: list[_FakeStream] = []

    def factory(**kwargs):
        streams.append(_FakeStream(**kwargs))
        return streams[-1]

    monkeypatch.setattr(tts_cli, "OUTPUT_STREAM_FACTORY", factory)
    out = tmp_path / "spoken.pcm"
    result = _run(TEXT, "--play", "-o", str(out))
    assert result.exit_code == 0
    (stream,) = streams
    assert stream.kwargs == {"samplerate": 22050, "channels": 1, "dtype": "int16"}
    assert len(stream.blocks) > 3 and stream.state == "closed"  # chunk by chunk
    assert b"".join(stream.blocks) == out.read_bytes()  # played what was written
    assert result.stdout_bytes == b""
    assert [p.name for p in tmp_path.iterdir()] == ["spoken.pcm"]  # no partial file left


def test_play_alone_writes_nothing_to_a_piped_stdout(monkeypatch):
    """`tts --play "..." | tee log` must not put audio bytes in the log."""
    monkeypatch.setattr(tts_cli, "OUTPUT_STREAM_FACTORY", _FakeStream)
    result = _run(TEXT, "--play")
    assert result.exit_code == 0 and result.stdout_bytes == b""


def test_play_without_portaudio_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "sounddevice", None)  # import fails
    result = _run("hello", "--play")
    assert result.exit_code == 1
    assert "PortAudio" in result.output


@pytest.mark.parametrize("speed", ["0.1", "5"])
def test_speed_range(speed):
    assert _run("hello", "--speed", speed).exit_code == 2
