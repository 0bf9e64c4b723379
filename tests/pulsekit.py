"""A private PulseAudio sound server for tests of the real audio path (PortAudio -> ALSA's pulse
plugin -> PulseAudio), with two null sinks standing in for a room:

- `room`: what the microphone hears. Its monitor is the default source, so a WAV played into
  it with `paplay` reaches whatever records from the default input device.
- `speaker`: the default sink, where llamactl plays; `record_speaker()` taps its monitor.

The two are apart, so the speaker is not heard by the microphone, until a test asks for the
echo of loudspeakers (`speaker_heard_in_room()`: a loopback from the speaker into the room).
Nothing outside the test's folder is touched: the daemon's socket, runtime dir and home are
the test's, and clients find it by `PULSE_SERVER`. Without pulseaudio, its tools or ALSA's
pulse plugin, `start_sound_server` skips the test with the reason
(`scripts/install-system-deps.sh --test` installs them).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import wave
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

ROOM, SPEAKER = "room", "speaker"
TOOLS = ("pulseaudio", "pactl", "paplay", "parec")


@dataclass
class SoundServer:
    env: dict[str, str]  # what a client needs to find this server
    folder: Path

    def pactl(self, *args: str) -> str:
        done = subprocess.run(
            ["pactl", *args], env=self.env, capture_output=True, text=True, timeout=10
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    def play_into_room(self, wav: Path) -> None:
        """The room hears `wav` (returns when it has been played)."""
        subprocess.run(["paplay", "-d", ROOM, str(wav)], env=self.env, check=True, timeout=60)

    @contextlib.contextmanager
    def speaker_heard_in_room(self, latency_ms: int = 60, volume: str = "50%") -> Iterator[None]:
        """Loudspeakers, no headphones: what the speaker plays reaches the room's microphone,
        `latency_ms` late and at `volume` (PulseAudio's: 50% is about -18 dB, an echo
        well below the user's voice, as from a speaker an arm away)."""
        module = self.pactl(
            "load-module",
            "module-loopback",
            f"source={SPEAKER}.monitor",
            f"sink={ROOM}",
            f"latency_msec={latency_ms}",
        ).strip()
        for line in self.pactl("list", "short", "sink-inputs").splitlines():
            fields = line.split("\t")
            if fields[3:4] == ["module-loopback.c"]:
                self.pactl("set-sink-input-volume", fields[0], volume)
        try:
            yield
        finally:
            self.pactl("unload-module", module)

    def recorders(self) -> int:
        """How many streams record now (the microphone, parec)."""
        return len(self.pactl("list", "short", "source-outputs").splitlines())

    def wait_for_recorder(self, more_than: int = 0, timeout: float = 60) -> None:
        """Until more than `more_than` streams record (a microphone was opened)."""
        deadline = time.monotonic() + timeout
        while self.recorders() <= more_than:
            assert time.monotonic() < deadline, "nothing started recording"
            time.sleep(0.05)

    @contextlib.contextmanager
    def record_speaker(self, rate: int = 16000) -> Iterator[Path]:
        """What is played to the speaker while the block runs, as a WAV file (ready after)."""
        out = self.folder / f"speaker-{time.monotonic_ns()}.wav"
        before = self.recorders()
        proc = subprocess.Popen(
            ["parec", "-d", f"{SPEAKER}.monitor", f"--rate={rate}", "--channels=1"]
            + ["--format=s16le", "--file-format=wav", str(out)],
            env=self.env,
        )
        try:
            self.wait_for_recorder(more_than=before, timeout=10)
            yield out
        finally:
            proc.send_signal(signal.SIGINT)  # parec finishes the WAV header on SIGINT
            proc.wait(10)


def _missing() -> str | None:
    absent = [tool for tool in TOOLS if shutil.which(tool) is None]
    if absent:
        return f"{', '.join(absent)} not installed (apt-get install pulseaudio pulseaudio-utils)"
    plugin_dirs = [Path(f"/usr/lib/{arch}/alsa-lib") for arch in _multiarch()]
    if not any((d / "libasound_module_pcm_pulse.so").exists() for d in plugin_dirs):
        return "ALSA's pulse plugin is not installed (apt-get install libasound2-plugins)"
    return None


def _multiarch() -> list[str]:
    machine = os.uname().machine
    return [f"{machine}-linux-gnu", "x86_64-linux-gnu", "aarch64-linux-gnu"]


@contextlib.contextmanager
def start_sound_server(folder: Path) -> Iterator[SoundServer]:
    why = _missing()
    if why:
        pytest.skip(why)
    runtime, home = folder / "runtime", folder / "home"
    runtime.mkdir(parents=True)
    home.mkdir()
    socket = runtime / "native"
    env = {**os.environ, "PULSE_SERVER": f"unix:{socket}", "XDG_RUNTIME_DIR": str(runtime)}
    modules = [
        f"module-native-protocol-unix socket={socket} auth-anonymous=1",
        f"module-null-sink sink_name={ROOM} rate=16000 channels=1",
        f"module-null-sink sink_name={SPEAKER} channels=1",
    ]
    log = (folder / "pulseaudio.log").open("wb")
    daemon = subprocess.Popen(
        ["pulseaudio", "-n", "--daemonize=no", "--exit-idle-time=-1", "--use-pid-file=no"]
        + [arg for module in modules for arg in ("-L", module)],
        env={**env, "HOME": str(home)},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    server = SoundServer(env, folder)
    try:
        deadline = time.monotonic() + 20
        while subprocess.run(["pactl", "info"], env=env, capture_output=True).returncode != 0:
            if daemon.poll() is not None or time.monotonic() > deadline:
                pytest.skip(f"pulseaudio did not start: {(folder / 'pulseaudio.log').read_text()}")
            time.sleep(0.1)
        server.pactl("set-default-sink", SPEAKER)
        server.pactl("set-default-source", f"{ROOM}.monitor")
        _check_portaudio_sees_it(env)
        yield server
    finally:
        daemon.terminate()
        daemon.wait(10)
        log.close()


def _check_portaudio_sees_it(env: dict[str, str]) -> None:
    probe = "import sounddevice as sd; print(sd.query_devices(kind='input')['name'])"
    done = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60
    )
    if done.returncode != 0:
        pytest.skip(f"PortAudio has no default input here: {done.stderr.strip()[-300:]}")


def read_wav(path: Path) -> tuple[np.ndarray, int]:
    with wave.open(str(path), "rb") as w:
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2"), w.getframerate()
