"""`llamactl tts`: speak text with eSpeak NG, to a file, to stdout, or to the speakers.

Audio is handled chunk by chunk as the synthesizer makes it: playback starts with the first
chunk, and WAV or raw PCM files are written as they grow. FLAC and MP3 are encoded at the end.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, BinaryIO

import numpy as np
import typer

from llamactl import (
    InvalidRequestError,
    PlaybackUnavailable,
    UnsupportedVoiceFeature,
    as_int16,
    atomic_output,
    encode,
    open_mtmd_synthesizer,
    open_synthesizer,
    pcm_bytes,
    wav_header,
)
from llamactl.cli._help import PlainHelpCommand
from llamactl.cli._output import is_tty, stdout_console
from llamactl.devices import BlockingPlayer

HELP = """Speak text: write it as audio to a file or stdout, or play it.

Text comes from the argument or, when piped, from stdin. eSpeak NG speaks it offline
(no model file needed). Without -o or --play, audio goes to stdout when stdout is not a
terminal, and is played when it is. A file is written whole: it appears when the speech ends.
"""

EPILOG = """\b
Examples:
  llamactl tts "Hello there" -o hello.wav
  echo "Read this aloud" | llamactl tts --play
  llamactl tts "Bonjour" --voice fr -o bonjour.flac
  llamactl tts "Raw samples" --format pcm | aplay -f S16_LE -r 22050 -c 1
  llamactl tts --list-voices
  llamactl tts "Hello" --model tts.gguf --mmproj mmproj-tts.gguf \\
      --speaker-ref me.wav --seed 7
"""

_SUFFIXES = {".wav": "wav", ".pcm": "pcm", ".raw": "pcm", ".flac": "flac", ".mp3": "mp3"}

# Stand-in for sounddevice.RawOutputStream (tests play into a list).
OUTPUT_STREAM_FACTORY: Callable[..., Any] | None = None


class AudioFormat(str, Enum):
    wav = "wav"
    pcm = "pcm"
    flac = "flac"
    mp3 = "mp3"


def register(app: typer.Typer) -> None:
    app.command("tts", help=HELP, epilog=EPILOG, cls=PlainHelpCommand)(tts_command)


def tts_command(
    text: Annotated[
        str | None,
        typer.Argument(help="Text to speak; read from stdin when omitted.", show_default=False),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Write the audio to this file.", show_default=False),
    ] = None,
    play: Annotated[bool, typer.Option("--play", help="Play through the speakers.")] = False,
    voice: Annotated[
        str | None,
        typer.Option("--voice", help="Voice name (see --list-voices).", show_default=False),
    ] = None,
    list_voices: Annotated[
        bool, typer.Option("--list-voices", help="List the voices and exit.")
    ] = False,
    speed: Annotated[
        float, typer.Option("--speed", min=0.25, max=4.0, help="Speaking rate, 0.25 to 4.")
    ] = 1.0,
    audio_format: Annotated[
        AudioFormat | None,
        typer.Option(
            "--format",
            help="pcm is s16le mono; default: from -o's suffix, else wav.",
            show_default=False,
        ),
    ] = None,
    speaker_ref: Annotated[
        Path | None,
        typer.Option(
            "--speaker-ref",
            help="Reference audio of the voice to clone (needs a TTS model that can clone).",
            show_default=False,
        ),
    ] = None,
    seed: Annotated[
        int | None,
        typer.Option(
            "--seed",
            min=0,
            max=2**32 - 1,
            help="Sampling seed of a TTS model (eSpeak NG is deterministic and ignores it).",
            show_default=False,
        ),
    ] = None,
    model: Annotated[
        Path | None,
        typer.Option(
            "--model",
            help="A llama.cpp TTS model .gguf (with --mmproj) instead of eSpeak NG.",
            show_default=False,
        ),
    ] = None,
    mmproj: Annotated[
        Path | None,
        typer.Option(
            "--mmproj", help="The TTS model's mmproj (its audio generator).", show_default=False
        ),
    ] = None,
) -> None:
    if model is not None:
        synth = open_mtmd_synthesizer(model, mmproj)
    elif mmproj is not None:
        raise InvalidRequestError("--mmproj needs --model (the TTS model it belongs to)")
    else:
        synth = open_synthesizer()
    if list_voices:
        _print_voices(synth.voices())
        return
    text = _read_text(text)
    reference = _read_reference(speaker_ref) if speaker_ref is not None else None
    if reference is not None and not synth.can_clone:
        raise UnsupportedVoiceFeature(
            f"the {synth.name} voice cannot be cloned from --speaker-ref; voice cloning needs "
            "a llama.cpp TTS model (--model/--mmproj)"
        )
    fmt = audio_format.value if audio_format else None
    if fmt is None:
        fmt = _SUFFIXES.get(output.suffix.lower(), "wav") if output else "wav"
    to_stdout = output is None and not play and not is_tty(sys.stdout)
    play = play or (output is None and not to_stdout)
    player = _open_player(synth.sample_rate) if play else None
    try:
        chunks = synth.synthesize(text, voice=voice, speed=speed, speaker_ref=reference, seed=seed)
    except InvalidRequestError as exc:
        if voice is not None and str(exc).startswith("Field 'voice'"):
            raise InvalidRequestError(_with_voice_list(str(exc), synth.voices())) from None
        raise
    sinks: list[Callable[[np.ndarray], None]] = []
    if player is not None:
        sinks.append(player.write)
    try:
        if output is not None:
            with atomic_output(output) as f:
                _write(f, _fan_out(chunks, sinks), synth.sample_rate, fmt)
        elif to_stdout:
            out = sys.stdout.buffer
            _write(out, _fan_out(chunks, sinks), synth.sample_rate, fmt)
            out.flush()
        else:
            for _ in _fan_out(chunks, sinks):
                pass
    finally:
        if player is not None:
            player.stop()
            player.close()


def _read_reference(path: Path) -> bytes:
    """The reference recording's bytes, checked to be audio the decoder can read."""
    from llamactl import read_audio

    if not path.is_file():
        raise InvalidRequestError(f"--speaker-ref: no such file: {path}")
    data = path.read_bytes()
    if not data:
        raise InvalidRequestError(f"--speaker-ref: {path} is empty")
    read_audio(data)  # raises a clear error for a file that is not audio
    return data


def _read_text(text: str | None) -> str:
    if text is None or text == "-":
        stdin = sys.stdin
        if text is None and is_tty(stdin):
            raise InvalidRequestError("no text: pass it as an argument or pipe it on stdin")
        text = stdin.read()
    if not text.strip():
        raise InvalidRequestError("no text to speak")
    return text


def _fan_out(
    chunks: Iterator[np.ndarray], sinks: list[Callable[[np.ndarray], None]]
) -> Iterator[np.ndarray]:
    for chunk in chunks:
        chunk = as_int16(chunk)
        for sink in sinks:
            sink(chunk)
        yield chunk


def _write(out: BinaryIO, chunks: Iterator[np.ndarray], rate: int, fmt: str) -> None:
    """pcm streams as made; wav streams too when `out` can seek back to fix its sizes."""
    if fmt == "pcm":
        for chunk in chunks:
            out.write(pcm_bytes(chunk))
            out.flush()
        return
    if fmt == "wav" and out.seekable() and out.tell() == 0:
        out.write(wav_header(rate, 0))
        n = 0
        for chunk in chunks:
            out.write(pcm_bytes(chunk))
            n += chunk.size
        out.seek(0)
        out.write(wav_header(rate, n))
        return
    parts = list(chunks)
    samples = np.concatenate(parts) if parts else np.zeros(0, np.int16)
    out.write(encode(samples, rate, fmt))


def _open_player(rate: int) -> BlockingPlayer:
    """The sound device, or one line saying why there is none (and what to do instead)."""
    try:
        return BlockingPlayer(rate, factory=OUTPUT_STREAM_FACTORY)
    except PlaybackUnavailable as exc:
        raise PlaybackUnavailable(f"{exc}; or write a file with -o") from None


def _with_voice_list(message: str, voices: list) -> str:
    """A refused --voice, with the names it could have been (the error is read at a terminal,
    where a list beats a pointer to --list-voices)."""
    import textwrap

    names = ", ".join(v.name for v in voices)
    return f"{message}. The voices:\n" + textwrap.fill(
        names, 88, break_on_hyphens=False, break_long_words=False
    )


def _print_voices(voices: list) -> None:
    console = stdout_console()
    width = max((len(v.name) for v in voices), default=4)
    for v in voices:
        console.print(f"{v.name:<{width}}  {v.gender:<6}  {v.description}", highlight=False)
