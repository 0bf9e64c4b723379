"""Semantic turn detection in `TranscriptionStream`: Smart Turn (the real model, fetched from
the pipecat-ai wheel) and real eSpeak speech through the real VAD and transcriber."""

from __future__ import annotations

import time

import numpy as np
import pytest
from audiokit import silence, speech, to_rate

from llamactl.core.errors import ModelNotFoundError
from llamactl.engine.audio import (
    EAGERNESS,
    AudioService,
    Committed,
    Completed,
    Tentative,
    TranscriptionStream,
    semantic_turn,
)
from llamactl.engine.audio.vad import WINDOW

MODEL_FIXTURES = {"service"}  # fixtures that load a model: users are slow

RATE = 16000


@pytest.fixture(autouse=True)
def _smart_turn(smart_turn):
    """Every test here finds Smart Turn (see conftest)."""


@pytest.fixture(scope="module")
def service(smart_turn_model):
    svc = AudioService(threads=2)
    yield svc
    svc.close()


def spoken(text: str) -> np.ndarray:
    pcm, rate = speech(text, "en-us")
    return to_rate(pcm, rate, RATE)  # int16


def run(stream: TranscriptionStream, audio: np.ndarray) -> list:
    stream.append(audio)
    stream.commit()
    assert stream.wait_idle(120)
    events = []
    while (ev := stream.next_event(timeout=0)) is not None:
        events.append(ev)
    return events


def auto_commits(events) -> list[Committed]:
    return [e for e in events if isinstance(e, Committed) and e.auto]


def test_the_eagerness_table():
    assert EAGERNESS == ("low", "medium", "high", "auto")
    assert semantic_turn("auto").max_ms == semantic_turn("medium").max_ms == 4000
    assert [semantic_turn(e).max_ms for e in ("low", "medium", "high")] == [8000, 4000, 2000]
    for level in EAGERNESS:
        rule = semantic_turn(level)
        assert 150 <= rule.finished_ms <= 250
        assert rule.silence_ms(1.0) == rule.finished_ms
        assert rule.finished_ms < rule.silence_ms(rule.threshold / 2) < rule.max_ms
        assert rule.silence_ms(0.0) == rule.max_ms
    with pytest.raises(ValueError, match="eagerness"):
        semantic_turn("eager")


def test_a_finished_question_ends_sooner_than_server_vad(service):
    speech_audio = spoken("What is the capital of France?")
    audio = np.concatenate([silence(0.5, RATE), speech_audio, silence(2.0, RATE)])
    ends = {}
    for mode in ("server", "semantic"):
        rule = semantic_turn("auto") if mode == "semantic" else None
        with service.open_stream(turn_detection=True, semantic=rule, partials=False) as stream:
            commits = auto_commits(run(stream, audio))
        assert len(commits) == 1, (mode, commits)
        ends[mode] = commits[0].position
    speech_end = (0.5 * RATE + speech_audio.size) / RATE
    assert ends["semantic"] - speech_end < 0.45  # ~200 ms of silence, not 500
    assert ends["server"] - ends["semantic"] >= 0.2, ends


def test_a_pause_in_the_middle_of_a_sentence_does_not_end_the_turn(service):
    first = np.concatenate([silence(0.5, RATE), spoken("I would like to know")])
    pause = silence(0.7, RATE)
    audio = np.concatenate([first, pause, spoken("the capital of France."), silence(4.5, RATE)])
    with service.open_stream(turn_detection=True, partials=False) as stream:
        assert len(auto_commits(run(stream, audio))) == 2  # server_vad (500 ms) cuts it
    rule = semantic_turn("auto")
    with service.open_stream(turn_detection=True, semantic=rule, partials=False) as stream:
        events = run(stream, audio)
    commits = auto_commits(events)
    assert len(commits) == 1  # at the end, within the 4 s bound at the latest
    assert commits[0].position > (first.size + pause.size) / RATE + 0.5
    done = [e for e in events if isinstance(e, Completed)]
    text = done[0].transcript.lower()
    assert "know" in text and "capital" in text, text


def test_an_unfinished_turn_ends_at_the_eagerness_bound(service):
    audio = np.concatenate([silence(0.5, RATE), spoken("I would like to know"), silence(3.0, RATE)])
    rule = semantic_turn("high")  # 2 s at most
    with service.open_stream(turn_detection=True, semantic=rule, partials=False) as stream:
        commits = auto_commits(run(stream, audio))
    assert len(commits) == 1
    speech_end = (audio.size - 3.0 * RATE) / RATE
    assert 0.5 < commits[0].position - speech_end <= rule.max_ms / 1000 + 0.2


def test_the_same_audio_ends_the_same_way_however_it_arrives(service):
    audio = np.concatenate(
        [spoken("Could you tell me"), silence(0.6, RATE), spoken("what time it is?")]
    )
    audio = np.concatenate([silence(0.3, RATE), audio, silence(1.5, RATE)])
    rule = semantic_turn("auto")
    positions = []
    for chunk in (audio.size, 1600):
        with service.open_stream(turn_detection=True, semantic=rule, partials=False) as stream:
            for i in range(0, audio.size, chunk):
                stream.append(audio[i : i + chunk])
            stream.commit()
            assert stream.wait_idle(120)
            events = []
            while (ev := stream.next_event(timeout=0)) is not None:
                events.append(ev)
        positions.append([c.position for c in auto_commits(events)])
    assert positions[0] == positions[1]


def test_switching_modes_on_a_live_stream(service):
    with service.open_stream(turn_detection=True, partials=False) as stream:
        stream.configure(semantic=semantic_turn("low"))
        assert stream.semantic is not None and stream.semantic.eagerness == "low"
        stream.configure(semantic=None)
        assert stream.semantic is None


def test_a_missing_smart_turn_model_is_a_clear_error(service, monkeypatch, tmp_path):
    monkeypatch.setenv("LLAMACTL_SMART_TURN_MODEL", str(tmp_path / "absent.onnx"))
    with pytest.raises(ModelNotFoundError, match="Smart Turn"):
        service.open_stream(turn_detection=True, semantic=semantic_turn())
    assert service.live_streams == 0
    with service.open_stream(turn_detection=True) as stream:
        with pytest.raises(ModelNotFoundError, match="Smart Turn"):
            stream.configure(semantic=semantic_turn())
        assert stream.semantic is None


@pytest.mark.parametrize("mode", ["server", "semantic"])
def test_the_transcript_is_read_before_the_turn_ends(service, mode):
    """Fed as the TUI's microphone sends it (50 ms blocks, each read by the VAD before the
    next comes), a finished turn's transcript is read while the VAD still waits out the
    turn's silence, so the answer can start at the commit. A semantic turn keeps half its
    short silence as end padding (100 ms at auto, server VAD keeps 200 ms of its 500): with
    200 ms its reading could only begin as the turn ended."""
    audio = np.concatenate([silence(0.3, RATE), spoken("Where is the train station?")])
    audio = np.concatenate([audio, silence(4.5, RATE)])
    rule = semantic_turn("auto") if mode == "semantic" else None
    with service.open_stream(turn_detection=True, semantic=rule, partials=False) as stream:
        log: list[str] = []
        read, emit = stream._read, stream._emit

        def reading(audio16: np.ndarray):
            log.append("read")
            return read(audio16)

        def emitting(event) -> None:
            log.append(type(event).__name__)
            emit(event)

        stream._read = reading  # type: ignore[method-assign]
        stream._emit = emitting  # type: ignore[method-assign]
        block = RATE // 20
        for i in range(0, audio.size, block):
            stream.append(audio[i : i + block])
            deadline = time.monotonic() + 30
            # the VAD has read the block, or waits at a Smart Turn reading
            while stream._vad_pos + WINDOW <= i + block and stream._turn_wait is None:
                assert time.monotonic() < deadline
                time.sleep(0.002)
        stream.commit()
        assert stream.wait_idle(60)
    assert log.count("Committed") >= 1, log
    after = log[log.index("Committed") :]
    assert "read" not in after, log  # nothing was left to read
    assert "Completed" in after


def _fed_like_a_microphone(stream: TranscriptionStream, audio: np.ndarray) -> list:
    """50 ms blocks, each read by the VAD (or waiting at a Smart Turn reading) before the
    next; then a commit, and every event in order."""
    audio = np.concatenate([audio, silence((-audio.size % WINDOW) / RATE, RATE)])
    block = RATE // 20
    for i in range(0, audio.size, block):
        stream.append(audio[i : i + block])
        deadline = time.monotonic() + 30
        while stream._vad_pos + WINDOW <= min(i + block, audio.size) and (
            stream._turn_wait is None
        ):
            assert time.monotonic() < deadline
            time.sleep(0.002)
        if stream.tentative:
            assert stream.wait_idle(30)  # the reading done ahead lands where it would live
    stream.commit()
    assert stream.wait_idle(60)
    events = []
    while (ev := stream.next_event(timeout=0)) is not None:
        events.append(ev)
    return events


@pytest.mark.parametrize("mode", ["server", "semantic"])
def test_a_tentative_transcript_comes_before_the_turn_ends_and_equals_it(service, mode):
    """What lets an answer start during the silence: the reading of a quiet turn is offered
    before the commit, and it is exactly the transcript the commit then completes with."""
    audio = np.concatenate([silence(0.3, RATE), spoken("Where is the train station?")])
    audio = np.concatenate([audio, silence(4.5, RATE)])
    rule = semantic_turn("auto") if mode == "semantic" else None
    with service.open_stream(
        turn_detection=True, semantic=rule, partials=False, tentative=True
    ) as stream:
        events = _fed_like_a_microphone(stream, audio)
    kinds = [type(e).__name__ for e in events]
    assert "Tentative" in kinds, kinds
    first_commit = next(i for i, e in enumerate(events) if isinstance(e, Committed) and e.auto)
    tentative = [e for e in events[:first_commit] if isinstance(e, Tentative)]
    assert tentative and tentative[-1].text, kinds
    done = next(e for e in events if isinstance(e, Completed))
    assert done.transcript == tentative[-1].text


def test_speech_after_a_pause_withdraws_the_tentative_transcript(service):
    """A pause long enough to be read but too short to end the turn: the offer is withdrawn
    when the speaker goes on, and the one that stands is the whole sentence's."""
    rule = semantic_turn("low")  # waits long on an unfinished sentence
    audio = np.concatenate(
        [
            silence(0.3, RATE),
            spoken("I would like to know"),
            silence(0.6, RATE),
            spoken("the capital of France."),
            silence(4.0, RATE),
        ]
    )
    with service.open_stream(
        turn_detection=True, semantic=rule, partials=False, tentative=True
    ) as stream:
        events = _fed_like_a_microphone(stream, audio)
    offers = [e.text for e in events if isinstance(e, Tentative)]
    commits = auto_commits(events)
    if len(commits) != 1:
        pytest.skip(f"Smart Turn ended the paused sentence early here: {offers}")
    assert offers[:2] == ["I would like to know", ""], offers  # withdrawn: the speech went on
    done = next(e for e in events if isinstance(e, Completed))
    assert "France" in done.transcript or "friends" in done.transcript
    # an offer standing at the commit (the second quiet may be read only after the turn
    # ended, then none stands) is the transcript
    if offers[-1]:
        assert offers[-1] == done.transcript


def test_no_tentative_transcript_unless_asked(service):
    audio = np.concatenate([silence(0.3, RATE), spoken("Hello there."), silence(2.0, RATE)])
    with service.open_stream(turn_detection=True, partials=False) as stream:
        events = _fed_like_a_microphone(stream, audio)
    assert not any(isinstance(e, Tentative) for e in events)
