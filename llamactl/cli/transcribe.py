"""`llamactl transcribe`: speech to text from a file, stdin or the microphone, as live captions.

Two engines, one output: in-process (the speech engine's `TranscriptionStream`) or, with
`--url`, a client of a running server's `/v1/realtime` transcription session. Both run with
turn detection (`--turn`: voice activity, semantic, or none), so each utterance becomes one
final line (or one JSON object) with the same start, end and text either way. While someone
speaks, the line being spoken updates in place at a terminal; in a pipe only final lines are
written.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TextIO

import numpy as np
import typer

from llamactl import EXIT_INTERRUPTED, LlamactlError
from llamactl.cli._devices import print_input_devices
from llamactl.cli._help import PlainHelpCommand
from llamactl.cli._output import color_enabled, is_tty, print_error, print_note
from llamactl.cli._settings_options import setting_help
from llamactl.cli._turns import EAGERNESS_HELP, TURN_HELP, Eagerness, TurnMode

if TYPE_CHECKING:  # imported when --url is used: pydantic models take a while to build
    from llamactl.realtime import protocol
    from llamactl.realtime.client import BlockingClient

HELP = """Transcribe speech: an audio file, raw PCM on stdin, or the microphone (live captions).

Each utterance becomes one line as soon as the speaker pauses; at a terminal the line being
spoken updates in place. The embedded Whisper tiny.en model runs in-process unless --url
points at a running `llamactl serve`, whose /v1/realtime session then does the work.
"""

EPILOG = """\b
Examples:
  llamactl transcribe meeting.wav             # one line per utterance
  llamactl transcribe talk.mp3 --json | jq .text   # {"start", "end", "text"}
  arecord -f S16_LE -r 16000 -c 1 | llamactl transcribe - --rate 16000
  llamactl transcribe --mic                   # live captions; Ctrl-C to stop
  llamactl transcribe --mic --turn semantic   # a pause does not cut a line
  llamactl transcribe --mic --url http://127.0.0.1:8080
"""

_INPUT = "Input"
_MODEL = "Model"
_OUTPUT = "Output"

CHUNK_S = 0.1  # stdin and file audio is fed in blocks of this length
WIRE_RATE = 16000  # what --url sends (the server resamples anything)
DRAIN_TIMEOUT = 60.0

# Stand-in for sounddevice.InputStream (tests feed a file through the microphone path).
MIC_STREAM_FACTORY: Callable[..., Any] | None = None


def register(app: typer.Typer) -> None:
    app.command("transcribe", help=HELP, epilog=EPILOG, cls=PlainHelpCommand)(transcribe_command)


def transcribe_command(
    source: Annotated[
        Path | None,
        typer.Argument(
            help="Audio file (WAV, FLAC, MP3, Ogg...), or - for raw PCM16 mono on stdin.",
            metavar="FILE",
            show_default=False,
        ),
    ] = None,
    mic: Annotated[
        bool, typer.Option("--mic", help="Record from the microphone.", rich_help_panel=_INPUT)
    ] = False,
    device: Annotated[
        int | None,
        typer.Option(
            "--device",
            help="Input device number for --mic (see --list-devices).",
            rich_help_panel=_INPUT,
            show_default=False,
        ),
    ] = None,
    list_devices: Annotated[
        bool,
        typer.Option("--list-devices", help="List input devices and exit.", rich_help_panel=_INPUT),
    ] = False,
    rate: Annotated[
        int,
        typer.Option(
            "--rate", help="Sample rate of raw PCM on stdin, in Hz.", rich_help_panel=_INPUT
        ),
    ] = 16000,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            "-m",
            help="Speech model: whisper-tiny.en (embedded), whisper-base (the speech-base "
            "extra), a CTranslate2 Whisper directory, or a llama.cpp audio .gguf.",
            rich_help_panel=_MODEL,
            show_default=False,
        ),
    ] = None,
    language: Annotated[
        str | None,
        typer.Option(
            "--language",
            "-l",
            help="Language code of the speech (e.g. en).",
            rich_help_panel=_MODEL,
            show_default=False,
        ),
    ] = None,
    threads: Annotated[
        int | None,
        typer.Option(
            "--threads",
            "-t",
            help=setting_help("transcribe_threads"),
            rich_help_panel=_MODEL,
            show_default=False,
        ),
    ] = None,
    url: Annotated[
        str | None,
        typer.Option(
            "--url",
            help="Use a running llamactl server's /v1/realtime instead of the local engine.",
            rich_help_panel=_MODEL,
            show_default=False,
        ),
    ] = None,
    api_key: Annotated[
        str | None,
        typer.Option(
            "--api-key",
            help="API key for --url.",
            envvar="LLAMACTL_API_KEY",
            rich_help_panel=_MODEL,
            show_default=False,
        ),
    ] = None,
    turn: Annotated[
        TurnMode,
        typer.Option(
            "--turn",
            help=TURN_HELP.format(manual="one transcript when the input ends"),
            rich_help_panel=_MODEL,
        ),
    ] = TurnMode.server,
    eagerness: Annotated[
        Eagerness,
        typer.Option("--eagerness", help=EAGERNESS_HELP, rich_help_panel=_MODEL),
    ] = Eagerness.auto,
    json_output: Annotated[
        bool,
        typer.Option(
            "--json",
            help='One JSON object per utterance: {"start", "end", "text"}.',
            rich_help_panel=_OUTPUT,
        ),
    ] = False,
) -> None:
    if list_devices:
        print_input_devices()
        return
    if mic and source is not None:
        raise typer.BadParameter("give either FILE or --mic, not both")
    if not mic and source is None:
        raise typer.BadParameter("give an audio FILE, - for raw PCM on stdin, or --mic")
    if device is not None and not mic:
        raise typer.BadParameter("--device goes with --mic")
    stdin = source is not None and str(source) == "-"
    if stdin and not 8000 <= rate <= 192000:
        raise typer.BadParameter(f"--rate must be between 8000 and 192000, got {rate}")

    view = CaptionView(sys.stdout, json_output=json_output)
    stop = threading.Event()
    if mic:
        from llamactl.devices import Microphone

        microphone = Microphone(device, rate=16000, stream_factory=MIC_STREAM_FACTORY).start()
        audio: AudioSource = AudioSource(microphone.blocks(), 16000, on_stop=microphone.stop)
    elif stdin:
        audio = AudioSource(_stdin_blocks(rate, stop), rate)
    else:
        assert source is not None
        audio = _file_source(source, stop)
    captions = Captions(view)
    runner: Runner = (
        RealtimeRunner(url, api_key, language, turn=turn.value, eagerness=eagerness.value)
        if url
        else LocalRunner(
            model,
            language,
            threads,
            partials=view.live,
            turn=turn.value,
            eagerness=eagerness.value,
        )
    )
    interrupted = False
    try:
        runner.run(audio, captions, stop)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        audio.stop()
        view.close()
    if interrupted and not mic:
        raise typer.Exit(EXIT_INTERRUPTED)
    if not view.lines:  # an empty stdout alone would look like a silent failure
        print_note("no speech heard")


# --------------------------------------------------------------------- input
@dataclass
class AudioSource:
    """Blocks of PCM (int16 or float32 arrays) at `rate`, and how to stop producing them."""

    blocks: Iterator[np.ndarray]
    rate: int
    on_stop: Callable[[], None] | None = None

    def stop(self) -> None:
        if self.on_stop is not None:
            self.on_stop()
            self.on_stop = None


def _file_source(path: Path, stop: threading.Event) -> AudioSource:
    from llamactl import read_audio

    if not path.is_file():
        raise LlamactlError(f"no such audio file: {path}")
    samples, rate = read_audio(path)
    step = max(1, int(rate * CHUNK_S) * 5)

    def blocks() -> Iterator[np.ndarray]:
        for i in range(0, samples.size, step):
            if stop.is_set():
                return
            yield samples[i : i + step]

    return AudioSource(blocks(), rate)


def _stdin_blocks(rate: int, stop: threading.Event) -> Iterator[np.ndarray]:
    stream = sys.stdin.buffer
    size = max(2, int(rate * CHUNK_S) * 2)
    left = b""
    while not stop.is_set():
        data = stream.read(size)
        if not data:
            return
        data = left + data
        cut = len(data) - len(data) % 2
        left = data[cut:]
        if cut:
            yield np.frombuffer(data[:cut], dtype="<i2")


# -------------------------------------------------------------------- output
class CaptionView:
    """Final lines (or JSON objects) on stdout; at a terminal, the line being spoken is
    redrawn in place until it is final."""

    def __init__(self, out: TextIO, *, json_output: bool) -> None:
        self.out = out
        self.json = json_output
        self.live = is_tty(out) and not json_output
        self._dim = color_enabled(out)
        self._drawn = False
        self.lines = 0  # final lines written: none means no speech was heard

    def _width(self) -> int:
        import shutil

        return max(20, shutil.get_terminal_size((80, 24)).columns - 1)

    def update(self, text: str) -> None:
        if not self.live or not text.strip():
            return
        text = " ".join(text.split())
        width = self._width()
        if len(text) > width:
            text = "…" + text[-(width - 1) :]
        styled = f"\x1b[2m{text}\x1b[0m" if self._dim else text
        self.out.write("\r\x1b[2K" + styled)
        self.out.flush()
        self._drawn = True

    def final(self, start: float, end: float, text: str) -> None:
        if self._drawn:
            self.out.write("\r\x1b[2K")
            self._drawn = False
        if self.json:
            record = {"start": round(start, 3), "end": round(end, 3), "text": text}
            self.out.write(json.dumps(record, ensure_ascii=False) + "\n")
        else:
            self.out.write(text + "\n")
        self.out.flush()
        self.lines += 1

    def close(self) -> None:
        if self._drawn:
            self.out.write("\r\x1b[2K")
            self.out.flush()
            self._drawn = False


@dataclass
class _Item:
    start: float | None = None
    end: float | None = None
    text: str = ""


class Captions:
    """Turns either engine's events into caption updates and final lines."""

    def __init__(self, view: CaptionView) -> None:
        self.view = view
        self._items: dict[Any, _Item] = {}

    def _item(self, key: Any) -> _Item:
        return self._items.setdefault(key, _Item())

    def started(self, key: Any, at: float) -> None:
        item = self._item(key)
        if item.start is None:
            item.start = at

    def stopped(self, key: Any, at: float) -> None:
        self._item(key).end = at

    def committed(self, key: Any, start: float, end: float) -> None:
        item = self._item(key)
        if item.start is None:
            item.start = start
        if item.end is None:
            item.end = end

    def delta(self, key: Any, text: str) -> None:
        item = self._item(key)
        item.text += text
        self.view.update(item.text)

    def partial(self, key: Any, text: str) -> None:
        item = self._item(key)
        self.view.update(f"{item.text} {text}".strip())

    def completed(self, key: Any, transcript: str) -> None:
        item = self._items.pop(key, _Item())
        text = transcript.strip()
        if text:
            start = item.start if item.start is not None else 0.0
            self.view.final(start, item.end if item.end is not None else start, text)


class Runner(ABC):
    """Where the transcription happens: in this process, or on a server (--url)."""

    @abstractmethod
    def run(self, audio: AudioSource, captions: Captions, stop: threading.Event) -> None: ...


def _interruptible(step: Callable[[], bool], stop: threading.Event, audio: AudioSource) -> None:
    """Run `step` until it returns True. The first Ctrl-C stops the input and lets the last
    utterance finish (flushed); a second one gives up."""
    deadline: float | None = None
    while True:
        try:
            if step():
                return
            if deadline is not None and time.monotonic() > deadline:
                raise LlamactlError("gave up waiting for the last transcript")
        except KeyboardInterrupt:
            if stop.is_set():
                raise
            stop.set()
            audio.stop()
            deadline = time.monotonic() + DRAIN_TIMEOUT


# ----------------------------------------------------------- in-process engine
class LocalRunner(Runner):
    def __init__(
        self,
        model: str | None,
        language: str | None,
        threads: int | None,
        *,
        partials: bool,
        turn: str = "server",
        eagerness: str = "auto",
    ) -> None:
        from llamactl.config import load_settings

        settings = load_settings({"transcribe_model": model, "transcribe_threads": threads})
        self.settings = settings
        self.language = language
        self.partials = partials
        self.turn = turn
        self.eagerness = eagerness

    def run(self, audio: AudioSource, captions: Captions, stop: threading.Event) -> None:
        from llamactl import (
            AudioService,
            Committed,
            Completed,
            Final,
            Partial,
            SpeechStarted,
            SpeechStopped,
            StreamFailed,
            semantic_turn,
        )

        s = self.settings
        service = AudioService(
            s.transcribe_model,
            mmproj=s.transcribe_mmproj,
            threads=s.transcribe_threads or s.threads,
        )
        try:
            stream = service.open_stream(
                language=self.language,
                turn_detection=self.turn != "manual",
                semantic=semantic_turn(self.eagerness) if self.turn == "semantic" else None,
                partials=self.partials,
                input_rate=audio.rate,
            )
            finished = threading.Event()
            failure: list[BaseException] = []

            def produce() -> None:
                try:
                    for block in audio.blocks:
                        if stop.is_set():
                            break
                        stream.append(block, audio.rate)
                    stream.commit()
                    stream.wait_idle()
                except BaseException as exc:  # surfaced on the main thread
                    failure.append(exc)
                finally:
                    finished.set()

            threading.Thread(target=produce, name="llamactl-feed", daemon=True).start()

            def step() -> bool:
                ev = stream.next_event(timeout=0.1)
                if ev is None:
                    if failure:
                        raise failure[0]
                    return finished.is_set() and stream.next_event(timeout=0) is None
                if isinstance(ev, SpeechStarted):
                    captions.started(ev.item, ev.position)
                elif isinstance(ev, SpeechStopped):
                    captions.stopped(ev.item, ev.position)
                elif isinstance(ev, Committed):
                    captions.committed(ev.item, ev.start, ev.position)
                elif isinstance(ev, Final):
                    captions.delta(ev.item, ev.delta)
                elif isinstance(ev, Partial):
                    captions.partial(ev.item, ev.text)
                elif isinstance(ev, Completed):
                    captions.completed(ev.item, ev.transcript)
                elif isinstance(ev, StreamFailed):
                    raise LlamactlError(ev.message)
                return False

            _interruptible(step, stop, audio)
            stream.close()
        finally:
            service.close()


# ---------------------------------------------------------------- via a server
class RealtimeRunner(Runner):
    """A client of `/v1/realtime?intent=transcription`, turns detected by the server."""

    def __init__(
        self,
        url: str,
        api_key: str | None,
        language: str | None,
        *,
        turn: str = "server",
        eagerness: str = "auto",
    ) -> None:
        self.url = url
        self.api_key = (api_key or "").split(",")[0].strip() or None
        self.language = language
        self.turn = turn
        self.eagerness = eagerness

    def run(self, audio: AudioSource, captions: Captions, stop: threading.Event) -> None:
        from llamactl.realtime.client import BlockingClient, RealtimeClient

        client = RealtimeClient(
            self.url, api_key=self.api_key, intent="transcription", open_timeout=30
        )
        with BlockingClient(client) as session:
            self._handshake(session)
            self._stream(session, audio, captions, stop)

    def _await(self, session: BlockingClient, wanted: type[protocol.ServerEvent]) -> None:
        from llamactl.realtime import protocol

        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            ev = session.recv(1.0)
            if isinstance(ev, protocol.ErrorEvent):
                raise LlamactlError(f"the server refused: {ev.error.message}")
            if isinstance(ev, wanted):
                return
        raise LlamactlError(f"no {wanted.model_fields['type'].default} from {self.url}")

    def _handshake(self, session: BlockingClient) -> None:
        from llamactl.realtime import protocol
        from llamactl.realtime.client import transcription_session_config

        self._await(session, protocol.SessionCreated)
        session.update_session(
            transcription_session_config(
                rate=WIRE_RATE, language=self.language, turn=self.turn, eagerness=self.eagerness
            )
        )
        self._await(session, protocol.SessionUpdated)

    def _stream(
        self, session: BlockingClient, audio: AudioSource, captions: Captions, stop: threading.Event
    ) -> None:
        from llamactl import StreamResampler, to_float32, to_pcm16
        from llamactl.realtime import protocol

        sent: dict[str, Any] = {"samples": 0, "final_ms": None}
        failure: list[BaseException] = []

        def append(samples: np.ndarray) -> None:
            if samples.size:
                session.append_audio(to_pcm16(samples))
                sent["samples"] += samples.size

        def produce() -> None:
            resampler = StreamResampler(audio.rate, WIRE_RATE)
            try:
                for block in audio.blocks:
                    if stop.is_set():
                        break
                    append(resampler.push(to_float32(block)))
                append(resampler.flush())
                sent["final_ms"] = int(sent["samples"] * 1000 / WIRE_RATE)
                session.commit()
            except BaseException as exc:
                failure.append(exc)
                sent["final_ms"] = -1

        threading.Thread(target=produce, name="llamactl-send", daemon=True).start()
        final_item: list[str | None] = []

        def step() -> bool:
            if failure:
                raise LlamactlError(f"sending audio failed: {failure[0]}")
            ev = session.recv(0.1)
            if isinstance(ev, protocol.SpeechStarted):
                captions.started(ev.item_id, (ev.audio_start_ms or 0) / 1000)
            elif isinstance(ev, protocol.SpeechStopped):
                captions.stopped(ev.item_id, (ev.audio_end_ms or 0) / 1000)
            elif isinstance(ev, protocol.InputAudioBufferCommitted):
                end_ms = ev.audio_end_ms or 0
                captions.committed(ev.item_id, (ev.audio_start_ms or 0) / 1000, end_ms / 1000)
                final_ms = sent["final_ms"]
                if final_ms is not None and end_ms >= final_ms - 1:
                    final_item.append(ev.item_id)
            elif isinstance(ev, protocol.InputTranscriptionDelta):
                captions.delta(ev.item_id, ev.delta)
            elif isinstance(ev, protocol.InputTranscriptionCompleted):
                captions.completed(ev.item_id, ev.transcript)
                return bool(final_item) and ev.item_id == final_item[0]
            elif isinstance(ev, protocol.ErrorEvent):
                print_error(f"server: {ev.error.message}")
            return False

        _interruptible(step, stop, audio)
