"""Hostile input on the speech paths, against the real server and the embedded eSpeak NG and
Whisper: voices that used to crash the process, implausible WAV headers, lone surrogates,
oversized uploads, realtime clients that never read. Every case must be a clear error and the
server must still answer afterwards."""

from __future__ import annotations

import base64
import io
import json
import os
import socket
import struct
import time
import wave

import httpx
import numpy as np
import pytest
from audiokit import SENTENCES, flac_silence, silence, speech, wav_bytes
from llamactl.server.openai.realtime.connection import LiveSessions
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from llamactl.engine.audio.synth_encode import encode

MODEL_FIXTURES = {"live"}  # fixtures that load a model: users are slow

CRASHING_VOICES = [
    "../" * 12 + "etc/passwd",
    "../" * 16 + "bin/ls",
    "/etc/passwd",
    "en-us+" + "a" * 60,
    "en-us+../../../../../../../../../../../../etc/passwd",
    "gmw/en",  # a file identifier: never passed through
    "en\x00us",
    "en-us+m3+m3",
    "\\..\\..\\etc",
]


@pytest.fixture(scope="module")
def live():
    from serverkit import run_server

    with run_server(parallel=1) as server:
        yield server


def _openai_error(r: httpx.Response, status: int = 400) -> dict:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body["error"]) == {"code", "message", "type"}
    assert body["error"]["code"] == status
    return body["error"]


def _healthy(live) -> None:
    assert httpx.get(live.url + "/health", timeout=5).status_code == 200


def _loud_wav(data: bytes) -> bool:
    with wave.open(io.BytesIO(data)) as w:
        pcm = np.frombuffer(w.readframes(w.getnframes()), "<i2")
    return pcm.size > 0 and float(np.sqrt(np.mean(pcm.astype(np.float64) ** 2))) > 300


# ------------------------------------------------------------------------ voices
@pytest.mark.parametrize("voice", CRASHING_VOICES)
def test_path_and_overflow_voices_are_400_and_the_server_lives(live, voice):
    speech_r = httpx.post(
        live.v1 + "/audio/speech",
        json={"model": "tts-1", "input": "Hello.", "voice": voice, "response_format": "wav"},
        timeout=30,
    )
    assert "'voice'" in _openai_error(speech_r)["message"]
    tts_r = httpx.post(live.url + "/tts", json={"input": "Hello.", "voice": voice}, timeout=30)
    message = _openai_error(tts_r)["message"]
    assert "'voice'" in message and "passwd" not in message[200:]
    _healthy(live)


@pytest.mark.parametrize(
    "voice", ["en-us", "EN-GB+F3", "en-us+m7", "en-us+Mr serious", "fr", "en", "English (America)"]
)
def test_known_voices_and_variants_still_speak(live, voice):
    r = httpx.post(live.url + "/tts", json={"input": "Hello there.", "voice": voice}, timeout=30)
    assert r.status_code == 200, r.text
    assert _loud_wav(r.content)


def test_openai_names_speak_on_the_openai_route(live):
    for voice in ("nova", "echo", "en-gb+f2"):
        r = httpx.post(
            live.v1 + "/audio/speech",
            json={"input": "Hello there.", "voice": voice, "response_format": "wav"},
            timeout=30,
        )
        assert r.status_code == 200 and _loud_wav(r.content)


def test_lone_surrogate_input_is_400(live):
    body = b'{"input": "hello \\ud800 there"}'
    headers = {"content-type": "application/json"}
    r = httpx.post(live.url + "/tts", content=body, headers=headers, timeout=30)
    assert "'input'" in _openai_error(r)["message"]
    body = b'{"model": "tts-1", "input": "hello \\udfff", "response_format": "pcm"}'
    r = httpx.post(live.v1 + "/audio/speech", content=body, headers=headers, timeout=30)
    # parsed off the loop by pydantic, which names the escape's place rather than the field
    assert "surrogate" in _openai_error(r)["message"]
    _healthy(live)


def test_tts_input_is_bounded(live):
    r = httpx.post(live.url + "/tts", json={"input": "a " * 10000}, timeout=30)
    assert "16384" in _openai_error(r)["message"]


# ------------------------------------------------------------------- audio input
def _wav_with_rate(rate: int, n_bytes: int = 8000) -> bytes:
    """A PCM16 mono WAV whose header claims `rate` (struct-built: `wave` refuses rate 0)."""
    data = np.zeros(n_bytes // 2, "<i2").tobytes()
    fmt = struct.pack("<HHIIHH", 1, 1, rate, (rate * 2) % 2**32, 2, 16)
    body = b"WAVE" + b"fmt " + struct.pack("<I", 16) + fmt + b"data"
    body += struct.pack("<I", len(data)) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body


def _transcribe(live, data: bytes, name: str = "a.wav") -> httpx.Response:
    return httpx.post(
        live.v1 + "/audio/transcriptions",
        files={"file": (name, data)},
        data={"model": "whisper-1"},
        timeout=120,
    )


@pytest.mark.parametrize("rate", [0, 1, 999, 384001, 2**32 - 1])
def test_implausible_wav_rates_are_400(live, rate):
    message = _openai_error(_transcribe(live, _wav_with_rate(rate)))["message"]
    assert "sample rate" in message and "1000" in message
    _healthy(live)


def test_plausible_wav_is_transcribed(live):
    pcm, rate = speech(SENTENCES[3])
    r = _transcribe(live, wav_bytes(pcm, rate))
    assert r.status_code == 200 and "train" in r.json()["text"].lower()


def _flac(seconds: float, rate: int = 16000) -> bytes:
    """Silence as FLAC, written by the engine's own encoder (what /v1/audio/speech sends)."""
    return encode(np.zeros(int(seconds * rate), np.int16), rate, "flac")


def test_audio_longer_than_max_audio_seconds_is_400(live, monkeypatch):
    monkeypatch.setattr(live.state.settings, "max_audio_seconds", 2.0)
    wav = wav_bytes(silence(3.0, 16000), 16000)
    assert "max_audio_seconds" in _openai_error(_transcribe(live, wav))["message"]
    flac = _flac(3.0)
    message = _openai_error(_transcribe(live, flac, "a.flac"))["message"]
    assert "max_audio_seconds" in message
    assert _transcribe(live, wav_bytes(silence(1.0, 16000), 16000)).status_code == 200


def test_upload_larger_than_max_audio_upload_mib_is_413(live, monkeypatch):
    monkeypatch.setattr(live.state.settings, "max_audio_upload_mib", 1)
    wav = wav_bytes(silence(40.0, 16000), 16000)  # 1.28 MB
    assert "max_audio_upload_mib" in _openai_error(_transcribe(live, wav), 413)["message"]


# ---------------------------------------------------------------------- realtime
class Realtime:
    def __init__(self, live, query: str = "", rcvbuf: int | None = None) -> None:
        url = live.url.replace("http://", "ws://") + "/v1/realtime" + query
        sock = None
        if rcvbuf is not None:  # a small fixed buffer: a client that stops reading is felt
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            sock.connect(("127.0.0.1", int(live.url.rsplit(":", 1)[1])))
        self._cm = connect(url, open_timeout=30, max_size=None, sock=sock)
        self.ws = self._cm.__enter__()

    def send(self, payload: dict | str) -> None:
        self.ws.send(payload if isinstance(payload, str) else json.dumps(payload))

    def until(self, type_: str, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            event = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if event["type"] == type_:
                return event

    def close(self) -> None:
        self._cm.__exit__(None, None, None)


@pytest.mark.parametrize("voice", CRASHING_VOICES[:4])
def test_realtime_bad_voice_is_an_error_event_and_the_session_is_unchanged(live, voice):
    c = Realtime(live)
    try:
        c.until("session.created")
        c.send({"type": "session.update", "session": {"audio": {"output": {"voice": voice}}}})
        error = c.until("error")["error"]
        assert error["param"] == "session.audio.output.voice"
        c.send({"type": "session.update", "session": {"instructions": "Be brief."}})
        session = c.until("session.updated")["session"]
        assert session["audio"]["output"]["voice"] == "alloy"
        c.send({"type": "session.update", "session": {"audio": {"output": {"voice": "fr"}}}})
        assert c.until("session.updated")["session"]["audio"]["output"]["voice"] == "fr"
    finally:
        c.close()
    _healthy(live)


def test_realtime_lone_surrogate_and_deep_nesting_are_error_events(live):
    c = Realtime(live)
    try:
        c.until("session.created")
        c.send(
            '{"type": "conversation.item.create", "item": {"type": "message", "role": "user",'
            ' "content": [{"type": "input_text", "text": "hi \\ud800"}]}}'
        )
        error = c.until("error")["error"]
        assert error["param"] == "item.content[0].text"
        c.send('{"type": "session.update", "session": {"instructions": "\\udc00"}}')
        assert c.until("error")["error"]["param"] == "session.instructions"
        c.send("[" * 200_000 + "]" * 200_000)
        assert c.until("error")["error"]["code"] == "invalid_json"
        c.send({"type": "x" * 100_000})
        error = c.until("error")["error"]
        assert len(error["message"]) <= 1024
        c.send(
            {
                "type": "conversation.item.create",
                "item": {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "Hello."}],
                },
            }
        )
        assert c.until("conversation.item.added")["item"]["content"][0]["text"] == "Hello."
    finally:
        c.close()


def _streams(live) -> int:
    from llamactl.server.speech.transcription import audio_service

    return audio_service(live.app).live_streams


def test_realtime_the_documented_15_mib_append_is_accepted(live):
    c = Realtime(live, "?intent=transcription")
    try:
        c.until("session.created")
        audio = np.zeros(15 * 1024 * 1024 // 2, "<i2").tobytes()
        payload = {"type": "input_audio_buffer.append", "audio": base64.b64encode(audio).decode()}
        started = time.monotonic()
        c.send(payload)
        c.send({"type": "input_audio_buffer.commit"})
        done = c.until("conversation.item.input_audio_transcription.completed", timeout=300)
        assert done["transcript"] == ""
        assert time.monotonic() - started < 300
    finally:
        c.close()


def test_realtime_buffered_audio_is_bounded(live, monkeypatch):
    monkeypatch.setattr(live.state.settings, "realtime_max_buffer_seconds", 60.0)
    c = Realtime(live, "?intent=transcription")
    try:
        c.until("session.created")
        minute = np.zeros(24000 * 50, "<i2").tobytes()  # 50 s at 24 kHz
        payload = {"type": "input_audio_buffer.append", "audio": base64.b64encode(minute).decode()}
        c.send(payload)
        c.send(payload)  # 100 s waiting, over the 60 s bound (the VAD cannot be that fast)
        error = c.until("error")["error"]
        assert error["code"] == "input_audio_buffer_full"
        assert "realtime_max_buffer_seconds" in error["message"]
        c.send({"type": "input_audio_buffer.commit"})
        c.until("input_audio_buffer.committed")
    finally:
        c.close()


class SilentClient:
    """A websocket client on a bare socket that sends frames and never reads one: the
    handshake is written by hand, so nothing drains the socket behind the test's back."""

    def __init__(self, live, query: str) -> None:
        port = int(live.url.rsplit(":", 1)[1])
        self.sock = socket.socket()
        # small and fixed before connecting (the window is agreed on connect): the server
        # feels a client that stops reading at once, not after tens of MB of kernel buffers
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        self.sock.settimeout(30)
        self.sock.connect(("127.0.0.1", port))
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            f"GET /v1/realtime{query} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            "Upgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            head += self.sock.recv(1)  # byte by byte: not one byte of a frame is read
        assert head.startswith(b"HTTP/1.1 101"), head

    def send_text(self, text: str) -> None:
        payload, mask = text.encode(), os.urandom(4)
        n = len(payload)
        if n < 126:
            header = struct.pack("!BB", 0x81, 0x80 | n)
        elif n < 65536:
            header = struct.pack("!BBH", 0x81, 0x80 | 126, n)
        else:
            header = struct.pack("!BBQ", 0x81, 0x80 | 127, n)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(header + mask + masked)

    def read_until_close(self, timeout: float) -> tuple[int, int | None, str]:
        """Read the server's frames up to its close frame: (bytes read, close code, reason);
        code None if the connection ended without one."""
        self.sock.settimeout(timeout)
        buf, total, pos = b"", 0, 0
        while True:
            if len(buf) - pos >= 2:
                opcode, n = buf[pos] & 0x0F, buf[pos + 1] & 0x7F
                start = pos + 2 + {126: 2, 127: 8}.get(n, 0)
                if len(buf) >= start:
                    if n == 126:
                        n = struct.unpack("!H", buf[pos + 2 : start])[0]
                    elif n == 127:
                        n = struct.unpack("!Q", buf[pos + 2 : start])[0]
                    if len(buf) >= start + n:
                        if opcode == 8:
                            code = struct.unpack("!H", buf[start : start + 2])[0]
                            return total, code, buf[start + 2 : start + n].decode()
                        pos = start + n
                        continue
            try:
                chunk = self.sock.recv(1 << 20)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                return total, None, ""
            total += len(chunk)
            buf = buf[pos:] + chunk
            pos = 0


def test_realtime_client_that_never_reads_is_dropped(live, monkeypatch):
    import threading

    from llamactl.server.openai.realtime import connection

    monkeypatch.setattr(connection, "MAX_QUEUED_BYTES", 1024 * 1024)
    # The server gives a dropped client 2 s to take the close frame; on a loaded machine this
    # test may start reading later than that, and the close frame is what it checks.
    monkeypatch.setattr(connection, "_CLOSE_TIMEOUT", 30.0)
    dropped = threading.Event()
    drop = connection.Connection._drop_client

    def spy(self):
        dropped.set()
        drop(self)

    monkeypatch.setattr(connection.Connection, "_drop_client", spy)
    c = SilentClient(live, "?intent=transcription")
    try:
        junk = json.dumps({"type": "unknown." + "x" * 2000})
        sent = 0
        c.sock.settimeout(1.0)
        while not dropped.is_set() and sent < 50_000:  # each answered by a ~1.2 KB error
            try:
                c.send_text(junk)
            except TimeoutError:  # the server stopped reading us: it has dropped us
                break
            sent += 1
        assert dropped.is_set(), f"the server kept a client that read none of {sent} errors"
        received, code, reason = c.read_until_close(timeout=30)
        assert received < 8 * 1024 * 1024  # what the socket buffers held, not the backlog
        assert code == 1008 and "not reading" in reason
    finally:
        c.sock.close()
    _healthy(live)
    again = Realtime(live, "?intent=transcription")
    try:
        again.until("session.created")
    finally:
        again.close()


def _audio_part(seconds: float) -> dict:
    pcm = np.zeros(int(24000 * seconds), "<i2").tobytes()
    return {"type": "input_audio", "audio": base64.b64encode(pcm).decode()}


def test_realtime_created_items_audio_and_text_are_bounded(live, monkeypatch):
    monkeypatch.setattr(live.state.settings, "realtime_max_buffer_seconds", 60.0)
    c = Realtime(live)
    try:
        c.until("session.created")
        item = {"type": "message", "role": "user", "content": [_audio_part(35), _audio_part(35)]}
        c.send({"type": "conversation.item.create", "item": item})
        error = c.until("error")["error"]
        assert error["code"] == "input_audio_buffer_full" and error["param"] == "item.content"
        item = {"type": "message", "role": "user", "content": [_audio_part(30)]}
        c.send({"type": "conversation.item.create", "item": item})
        c.until("conversation.item.done")
        text = {"type": "input_text", "text": "a" * (1024 * 1024 + 1)}
        item = {"type": "message", "role": "user", "content": [text]}
        c.send({"type": "conversation.item.create", "item": item})
        error = c.until("error")["error"]
        assert error["code"] == "conversation_full"
        hi = {"type": "input_text", "text": "Hi"}
        item = {"type": "message", "role": "user", "content": [hi]}
        c.send({"type": "conversation.item.create", "item": item})
        assert c.until("conversation.item.added")["item"]["content"][0]["text"] == "Hi"
    finally:
        c.close()


def test_tts_multipart_file_part_is_bounded(live):
    from llamactl.server.llamacpp.tts.routes import MAX_BODY

    big = b"\0" * (MAX_BODY + 1)
    r = httpx.post(
        live.url + "/tts", data={"input": "Hi."}, files={"speaker_ref": ("a.wav", big)}, timeout=60
    )
    assert r.status_code == 413, r.text
    _healthy(live)


def test_realtime_out_of_band_responses_are_bounded(live):
    c = Realtime(live)
    try:
        c.until("session.created")
        ask = {"type": "input_text", "text": "Count from one to fifty."}
        response = {
            "conversation": "none",
            "output_modalities": ["text"],
            "max_output_tokens": 64,
            "input": [{"type": "message", "role": "user", "content": [ask]}],
        }
        for _ in range(6):
            c.send({"type": "response.create", "response": response})
        events, done = [], 0
        deadline = time.monotonic() + 120
        while done < 4 and time.monotonic() < deadline:
            events.append(json.loads(c.ws.recv(timeout=120)))
            done += events[-1]["type"] == "response.done"
        codes = [e["error"]["code"] for e in events if e["type"] == "error"]
        assert done == 4 and codes.count("too_many_active_responses") == 2
    finally:
        c.close()


def test_read_audio_decodes_straight_to_the_asked_rate_within_the_bound():
    from llamactl.engine.audio.decode import AudioTooLongError, read_audio

    for data in (_flac(2.0, 48000), wav_bytes(silence(2.0, 48000), 48000)):
        pcm, rate = read_audio(data, max_seconds=3.0, rate=16000)
        assert rate == 16000 and abs(pcm.size - 32000) < 1600
        with pytest.raises(AudioTooLongError, match="max_audio_seconds"):
            read_audio(data, max_seconds=1.5, rate=16000)


def test_realtime_sessions_are_bounded(live, monkeypatch):
    monkeypatch.setattr(live.state.settings, "realtime_max_sessions", 1)
    first = Realtime(live, "?intent=transcription")
    try:
        first.until("session.created")
        second = Realtime(live, "?intent=transcription")
        try:
            error = json.loads(second.ws.recv(timeout=30))["error"]
            assert error["code"] == "too_many_sessions"
            assert "realtime_max_sessions" in error["message"]
            with pytest.raises(ConnectionClosed) as closed:
                second.ws.recv(timeout=30)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1013
        finally:
            second.close()
    finally:
        first.close()
    deadline = time.monotonic() + 30
    live_sessions = live.state.family_state(LiveSessions)
    while live_sessions.count and time.monotonic() < deadline:
        time.sleep(0.05)
    third = Realtime(live, "?intent=transcription")
    try:
        third.until("session.created")
    finally:
        third.close()


def test_wire_names_the_bad_string_and_escapes_what_it_cannot_encode():
    from llamactl.server.openai.realtime.wire import encode_event, lone_surrogate_at

    event = {"type": "x", "item": {"content": [{"text": "ok"}, {"text": "bad \ud83d"}]}}
    assert lone_surrogate_at(event) == "item.content[1].text"
    assert lone_surrogate_at({"type": "x", "\udc00": 1}) == "<key>"
    assert lone_surrogate_at({"type": "fine", "text": "héllo ✓"}) is None
    nested: list = []
    for _ in range(100_000):  # deeper than any recursive walk could go
        nested = [nested]
    assert lone_surrogate_at({"type": "x", "deep": nested}) is None
    from llamactl.realtime import protocol

    delta = protocol.InputTranscriptionDelta.build(
        item_id="item_1", content_index=0, delta="a\ud800b"
    )
    text = encode_event(delta)
    assert text.encode("utf-8") and json.loads(text)["delta"] == "a\ud800b"


def test_voice_names_resolve_only_listed_names():
    from llamactl.engine.audio.synth_espeak_voices import ListedVoice, VoiceNames

    names = VoiceNames(
        [
            ListedVoice("gmw/en-US", ("en-us", "en"), "English (America)"),
            ListedVoice("gmw/en", ("en-gb", "en"), "English (Great Britain)"),
        ],
        ["f3", "Mr serious"],
    )
    assert names.resolve("EN-US") == b"gmw/en-US"
    assert names.resolve("en") == b"gmw/en"  # the voice whose file is named so
    assert names.resolve("english (america)+MR SERIOUS") == b"gmw/en-US+Mr serious"
    for bad in ("gmw/en", "en-us+../f3", "en-us+", "../../etc/passwd", "x" * 65, "en-us+f3+f3"):
        with pytest.raises(Exception, match="Field 'voice'"):
            names.resolve(bad)


# ---------------------------------------------------------------- uploads are audio, nothing else
# Issue 31 row 1: FFmpeg's probing took any container, so a 44-byte `ffconcat` playlist made the
# server open and transcribe a file of its own disk (and a FIFO it named hung the workers).


def _container(fmt: str, codec: str, seconds: float = 1.0, rate: int = 16000) -> bytes:
    """A tone in `fmt`/`codec`, written with PyAV (what a client's recorder would send)."""
    import av

    out = io.BytesIO()
    with av.open(out, "w", format=fmt) as container:
        stream = container.add_stream(codec, rate=rate)
        stream.layout = "mono"
        t = np.arange(int(seconds * rate)) / rate
        pcm = (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32).reshape(1, -1)
        frame = av.AudioFrame.from_ndarray(pcm, format="flt", layout="mono")
        frame.sample_rate = rate
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            container.mux(packet)
    return out.getvalue()


@pytest.fixture
def server_secrets(tmp_path, monkeypatch):
    """The server's working directory holds a private recording and a FIFO."""
    private = tmp_path / "private"
    private.mkdir()
    pcm, rate = speech(SENTENCES[3])
    (private / "memo.wav").write_bytes(wav_bytes(pcm, rate))
    (private / "memo.wav").chmod(0o600)
    os.mkfifo(private / "pipe")
    monkeypatch.chdir(tmp_path)
    return private


PLAYLISTS = {
    "ffconcat, relative": b"ffconcat version 1.0\nfile private/memo.wav\n",
    "ffconcat, absolute": b"ffconcat version 1.0\nfile {abs}/memo.wav\n",
    "ffconcat, a FIFO": b"ffconcat version 1.0\nfile private/pipe\n",
    "HLS": b"#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:10,\nprivate/memo.wav\n#EXT-X-ENDLIST\n",
    "SDP": b"v=0\no=- 0 0 IN IP4 127.0.0.1\ns=x\nc=IN IP4 127.0.0.1\nm=audio 9 RTP/AVP 0\n",
    "image2 pattern": b"private/memo.wav",
    "a PNG": b"\x89PNG\r\n\x1a\n" + bytes(40),
}


@pytest.mark.parametrize("name", list(PLAYLISTS))
def test_playlists_and_other_non_audio_uploads_read_no_file(live, server_secrets, name):
    data = PLAYLISTS[name].replace(b"{abs}", str(server_secrets).encode())
    t0 = time.monotonic()
    message = _openai_error(_transcribe(live, data, "memo.mp3"))["message"]
    assert time.monotonic() - t0 < 60  # a FIFO opened for reading would block forever
    assert "not audio llamactl reads" in message
    assert "private" not in message and "memo" not in message  # nothing about the disk
    _healthy(live)


@pytest.mark.parametrize(
    ("fmt", "codec", "rate"),
    [
        ("flac", "flac", 16000),
        ("ogg", "libopus", 48000),
        ("mp3", "libmp3lame", 16000),
        ("webm", "libopus", 48000),
        ("ipod", "aac", 16000),  # .m4a
        ("mp4", "aac", 16000),
        ("wav", "pcm_f32le", 16000),  # a WAV codec `wave` does not read: through PyAV
    ],
)
def test_every_allowed_container_still_decodes(fmt, codec, rate):
    from llamactl.engine.audio.decode import read_audio

    pcm, got = read_audio(_container(fmt, codec, 1.0, rate), max_seconds=10, rate=16000)
    assert got == 16000 and abs(pcm.size - 16000) < 2000 and np.abs(pcm).max() > 0.1


def test_a_file_that_is_not_audio_is_a_plain_message(live):
    r = _transcribe(live, b"just some text, not a recording at all\n", "a.txt")
    message = _openai_error(r)["message"]
    assert message.startswith("the file is not audio llamactl reads (WAV, FLAC")
    assert "Errno" not in message


def test_a_flac_bomb_is_refused_from_its_header(live):
    """Issue 31 row 10: 1 h of 48 kHz silence is ~490 KB of FLAC; it decoded to over 1 GB.
    The header states the length, and the file's size cannot pay for it: a 400 before any
    frame is decoded."""
    hour = flac_silence(3600, 48000)
    assert len(hour) < 1_000_000
    t0 = time.monotonic()
    message = _openai_error(_transcribe(live, hour, "hour.flac"))["message"]
    assert "kbps" in message and "3600 s" in message
    assert time.monotonic() - t0 < 30  # decoding it took minutes on two cores
    _healthy(live)


def test_the_size_bound_lets_real_compressed_speech_through():
    """Two minutes of Opus at its lowest bitrate is far above the 2 kbps floor."""
    from llamactl.engine.audio.decode import AudioBound

    bound = AudioBound(max_seconds=3600, size=120 * 750)  # 6 kbps for 120 s
    bound.check(120.0)
    with pytest.raises(Exception, match="kbps"):
        AudioBound(max_seconds=3600, size=10_000).check(120.0)
    AudioBound(max_seconds=3600, size=100).check(59.0)  # a short clip costs nothing


def test_the_cli_refuses_a_fifo_without_blocking(tmp_path):
    from llamactl.core.errors import AudioDecodeError
    from llamactl.engine.audio.decode import read_audio

    os.mkfifo(tmp_path / "pipe.wav")
    with pytest.raises(AudioDecodeError, match="not a regular file"):
        read_audio(tmp_path / "pipe.wav")
