"""`TranscriptionStream`: the commit rule, items, turn detection, partials and resources."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from audiokit import SENTENCES, heard, silence, speech, to_rate, utterances

from llamactl.engine.audio import (
    AudioService,
    Cleared,
    Committed,
    Completed,
    Final,
    Partial,
    SpeechStarted,
    SpeechStopped,
    TranscriptionStream,
)
from llamactl.engine.audio.stream import StreamClosedError
from llamactl.engine.audio.worker import AudioWorker, ComputeGate

MODEL_FIXTURES = {"service"}  # fixtures that load a model: users are slow

VOICE = "en-us+f2"


@pytest.fixture(scope="module")
def service():
    svc = AudioService(threads=2)
    yield svc
    svc.close()


def say(i: int) -> tuple[np.ndarray, int]:
    return speech(SENTENCES[i], VOICE)


def drain(stream: TranscriptionStream, timeout: float = 60) -> list:
    assert stream.wait_idle(timeout)
    events = []
    while (ev := stream.next_event(timeout=0)) is not None:
        events.append(ev)
    return events


def completed(events) -> dict[int, Completed]:
    return {e.item: e for e in events if isinstance(e, Completed)}


def test_commits_complete_in_order_and_back_to_back_commits_are_items(service):
    a, rate = say(0)
    b, _ = say(1)
    with service.open_stream(input_rate=rate) as stream:
        stream.append(a)
        stream.commit()
        stream.commit()  # back to back: an empty item of its own
        stream.append(b)  # appended while item 0 may still be read: belongs to item 2
        stream.commit()
        events = drain(stream)
    kinds = [(type(e).__name__, e.item) for e in events if isinstance(e, Committed | Completed)]
    assert [k for k in kinds if k[0] == "Committed"] == [("Committed", i) for i in range(3)]
    assert [k for k in kinds if k[0] == "Completed"] == [("Completed", i) for i in range(3)]
    for item in range(3):  # each item completes after its commit
        assert kinds.index(("Committed", item)) < kinds.index(("Completed", item))
    done = completed(events)
    assert heard(0, done[0].transcript), done[0].transcript
    assert done[1].transcript == "" and done[1].duration == 0
    assert heard(1, done[2].transcript), done[2].transcript
    assert done[0].end == done[1].start == done[1].end == done[2].start
    finals = [e for e in events if isinstance(e, Final)]
    assert {f.item for f in finals} == {0, 2}


def test_commit_inside_continuous_speech_splits_it_at_the_commit(service):
    a, rate = say(3)
    b, _ = say(4)
    with service.open_stream(input_rate=rate) as stream:
        stream.append(a)
        assert stream.commit() == pytest.approx(a.size / rate, abs=0.01)
        stream.append(b)  # no pause: speech runs across the commit
        stream.commit()
        done = completed(drain(stream))
    assert heard(3, done[0].transcript), done[0].transcript
    assert heard(4, done[1].transcript), done[1].transcript


def test_clear_drops_the_uncommitted_audio(service):
    a, rate = say(0)
    b, _ = say(2)
    with service.open_stream(input_rate=rate) as stream:
        stream.append(a)
        stream.clear()
        stream.append(b)
        stream.commit()
        events = drain(stream)
    assert [e.item for e in events if isinstance(e, Cleared)] == [0]
    done = completed(events)
    assert list(done) == [1]
    assert heard(2, done[1].transcript)
    assert "park" not in " ".join(e.delta for e in events if isinstance(e, Final)).lower()


def test_turn_detection_commits_each_utterance(service):
    pcm, rate = utterances(SENTENCES[:2], voice=VOICE, gap=1.0)
    with service.open_stream(input_rate=rate, turn_detection=True) as stream:
        stream.append(np.concatenate([pcm, silence(1.0, rate)]))
        stream.commit()
        events = drain(stream)
    auto = [e for e in events if isinstance(e, Committed) and e.auto]
    assert [e.item for e in auto] == [0, 1]
    started = [e for e in events if isinstance(e, SpeechStarted)]
    stopped = [e for e in events if isinstance(e, SpeechStopped)]
    assert len(started) == len(stopped) == 2
    assert started[0].position < stopped[0].position <= auto[0].position < started[1].position
    done = completed(events)
    for i in range(2):
        assert heard(i, done[i].transcript), done[i].transcript
    assert done[2].transcript == ""  # the final commit holds only trailing silence


def test_silence_never_becomes_text(service):
    with service.open_stream(input_rate=16000, turn_detection=True) as stream:
        stream.append(silence(3.0, 16000))
        noise = np.random.default_rng(3).standard_normal(16000 * 2) * 0.01
        stream.append(noise.astype(np.float32))
        stream.commit()
        events = drain(stream)
    assert not [e for e in events if isinstance(e, Final | Partial | SpeechStarted)]
    assert [e.transcript for e in events if isinstance(e, Completed)] == [""]


def test_partials_while_speaking_then_the_final(service):
    pcm, rate = say(1)
    pcm = np.concatenate([silence(0.3, rate), pcm, silence(1.0, rate)])
    step = rate // 2
    with service.open_stream(input_rate=rate, partial_interval=0.5) as stream:
        for i in range(0, pcm.size, step):  # about 3x real time
            stream.append(pcm[i : i + step])
            time.sleep(0.17)
        stream.commit()
        events = drain(stream)
    partials = [e for e in events if isinstance(e, Partial)]
    final = next(e for e in events if isinstance(e, Final))
    assert partials and events.index(partials[0]) < events.index(final)
    assert heard(1, final.segment.text)


def test_concurrent_streams_never_mix(service):
    streams = []
    audio = [say(i) for i in (0, 2, 4)]
    for _, rate in audio:
        streams.append(service.open_stream(input_rate=rate))
    step = 4410
    longest = max(pcm.size for pcm, _ in audio)
    for offset in range(0, longest, step):  # interleaved, like sessions on one server
        for stream, (pcm, _) in zip(streams, audio, strict=True):
            if offset < pcm.size:
                stream.append(pcm[offset : offset + step])
    for stream in streams:
        stream.commit()
    for stream, sentence in zip(streams, (0, 2, 4), strict=True):
        text = completed(drain(stream))[0].transcript
        assert heard(sentence, text), text
        stream.close()


def test_close_frees_the_stream_at_once(service):
    before = service.live_streams
    stream = service.open_stream()
    assert service.live_streams == before + 1
    stream.append(say(0)[0][:8000])
    stream.close()
    assert service.live_streams == before
    with pytest.raises(StreamClosedError):
        stream.append(b"\x00\x00")


def test_partials_wait_while_the_language_model_decodes(service):
    gate = ComputeGate(lambda: True, max_defer=0.2)  # the LLM never stops
    worker = AudioWorker(service.transcriber, gate)
    try:
        pcm, rate = say(0)
        stream = TranscriptionStream(worker, input_rate=rate, partial_interval=0.3)
        for i in range(0, pcm.size, rate // 4):
            stream.append(pcm[i : i + rate // 4])
            time.sleep(0.05)
        stream.commit()
        events = drain(stream)
        assert not [e for e in events if isinstance(e, Partial)]
        assert heard(0, completed(events)[0].transcript)
        stream.close()
    finally:
        worker.close()


def test_prefix_padding_survives_buffer_compaction(service):
    """The buffer drops audio the VAD has read, but keeps the prefix padding a region starting
    at the next window reaches back to (a one-time race, made certain here)."""
    pcm, rate = say(0)
    with service.open_stream(input_rate=16000) as stream:
        stream.append(silence(1.0, 16000))
        deadline = time.monotonic() + 10
        while stream._vad_pos < 15000 and time.monotonic() < deadline:
            time.sleep(0.01)
        # one append larger than the buffer: it is compacted while speech has not started
        stream.append(np.concatenate([to_rate(pcm, rate, 16000), silence(9.0, 16000)]))
        stream.commit()
        done = completed(drain(stream))
    assert heard(0, done[0].transcript), done[0].transcript
    # the region reaches back by its prefix padding (300 ms) before the first sound, into
    # audio the compaction would have dropped had it not kept it
    onset = 1.0 + np.argmax(np.abs(pcm.astype(np.int32)) > 300) / rate
    assert done[0].segments[0].start < onset - 0.15, (done[0].segments, onset)


def test_a_reading_ahead_is_reused_only_when_it_holds_the_end_padding():
    """A partial taken just after the last word lacks the end padding the final reading has;
    reusing it made the transcript depend on when that partial happened to run."""
    from llamactl.engine.audio.stream import _Region

    pad = 3200
    quiet, end = 48000, 48000 + pad
    cut_short = _Region(0, 16000, end=end, quiet_from=quiet, read_end=quiet + 512)
    padded = _Region(0, 16000, end=end, quiet_from=quiet, read_end=quiet + pad)
    longer = _Region(0, 16000, end=end, quiet_from=quiet, read_end=end + 4096)
    assert not cut_short.reusable(pad)
    assert padded.reusable(pad) and longer.reusable(pad)


def test_a_voice_turn_s_readings_go_before_the_language_model(service):
    """Speech first, by plan: with the LLM always busy, a turn-detecting stream's quiet
    reading and Smart-Turn-free final reading run at once inside `CoreShare.speech()` (the
    decode loop pauses meanwhile) instead of waiting out the gate; the counters say so."""
    from llamactl.engine.cores import CoreShare

    cores = CoreShare()
    gate = ComputeGate(lambda: True, max_defer=2.0, cores=cores)  # the LLM never stops
    worker = AudioWorker(service.transcriber, gate)
    held: list[bool] = []
    try:
        pcm, rate = say(0)
        stream = TranscriptionStream(
            worker, input_rate=rate, turn_detection=True, partials=False, tentative=True
        )
        original = stream._read

        def reading(audio16):
            held.append(cores.speech_running)
            return original(audio16)

        stream._read = reading  # type: ignore[method-assign]
        audio = np.concatenate([silence(0.3, rate), pcm, silence(1.5, rate)])
        for i in range(0, audio.size, rate // 20):
            stream.append(audio[i : i + rate // 20])
            time.sleep(0.01)
        events = drain(stream)
        stream.close()
    finally:
        worker.close()
    assert held and all(held), held  # every reading ran as a voice turn's speech work
    assert heard(0, completed(events)[0].transcript)
    stages = cores.stages()
    reads = [s for s in ("asr_ahead", "asr") if s in stages]
    assert reads, stages
    for stage in reads:
        assert stages[stage].wait_seconds < 0.5 * stages[stage].count, stages  # no 2 s gate


def test_the_decode_loop_pauses_while_speech_computes():
    from llamactl.engine.cores import CoreShare

    cores = CoreShare(max_pause=5.0)
    released = threading.Event()

    def speak() -> None:
        with cores.speech():
            released.wait(5)

    speaker = threading.Thread(target=speak)
    speaker.start()
    while not cores.speech_running:
        time.sleep(0.001)
    waiter = threading.Thread(target=cores.pause_for_speech)
    waiter.start()
    time.sleep(0.2)
    assert waiter.is_alive()  # decoding waits while speech computes
    released.set()
    speaker.join()
    waiter.join(2)
    assert not waiter.is_alive()
    assert cores.llm_paused_seconds >= 0.15
    cores.pause_for_speech()  # nothing running: returns at once
