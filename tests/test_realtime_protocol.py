"""The Realtime protocol module (`llamactl.realtime.protocol`) without a server: the server's
refusals of bad client input are pinned to what they were before the protocol had models
(tests/data/realtime_refusals.json was written by the hand-written checks), and the events
llamactl sends or reads validate against the same models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from llamactl.server.openai.realtime import conversation_config as cc
from llamactl.server.openai.realtime import transcription_config as tc
from llamactl.server.openai.realtime.conversation import ConversationSession

from llamactl.realtime import protocol
from llamactl.realtime.errors import ProtocolError

PINNED = json.loads((Path(__file__).parent / "data" / "realtime_refusals.json").read_text())

SESSION_T = [  # transcription session.update bodies
    {"audio": 5},
    {"audio": {"input": []}},
    {"audio": {"input": {"format": "pcm"}}},
    {"audio": {"input": {"format": {"type": "audio/pcmu"}}}},
    {"audio": {"input": {"format": {"rate": 7999}}}},
    {"audio": {"input": {"format": {"rate": True}}}},
    {"audio": {"input": {"format": {"rate": None}}}},
    {"audio": {"input": {"format": {"rate": 16000.0}}}},
    {"audio": {"input": {"transcription": "x"}}},
    {"audio": {"input": {"transcription": {"model": "nope"}}}},
    {"audio": {"input": {"transcription": {"language": 5}}}},
    {"audio": {"input": {"transcription": {"prompt": ["a"]}}}},
    {"audio": {"input": {"turn_detection": "on"}}},
    {"audio": {"input": {"turn_detection": {"type": "smart_vad"}}}},
    {"audio": {"input": {"turn_detection": {"threshold": 2}}}},
    {"audio": {"input": {"turn_detection": {"threshold": True}}}},
    {"audio": {"input": {"turn_detection": {"prefix_padding_ms": "a"}}}},
    {"audio": {"input": {"turn_detection": {"silence_duration_ms": 50}}}},
    {"include": "x"},
    {"include": [1]},
]
SESSION_T_OK = [
    {},
    {"audio": {}},
    {"audio": {"input": {}}},
    {"audio": {"input": {"format": None, "transcription": None}}},
    {"audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}}}},
    {"audio": {"input": {"transcription": {"model": "", "language": "en", "prompt": None}}}},
    {"audio": {"input": {"transcription": {"model": "whisper", "language": None}}}},
    {
        "audio": {
            "input": {
                "turn_detection": {
                    "type": "server_vad",
                    "threshold": 0.7,
                    "prefix_padding_ms": 100.0,
                    "silence_duration_ms": None,
                    "create_response": "x",
                    "idle_timeout_ms": 5,
                }
            }
        }
    },
    {"audio": {"input": {"turn_detection": None}}},
    {"audio": {"input": {"noise_reduction": {"type": "near_field"}}}, "include": None},
    {"include": ["item.input_audio_transcription.logprobs"]},
    {"output_modalities": ["video"], "model": "other"},
]
SESSION_R = [  # conversation session.update bodies
    {"audio": {"input": {"turn_detection": {"create_response": "yes"}}}},
    {"audio": {"input": {"turn_detection": {"interrupt_response": 1}}}},
    {"model": "other"},
    {"tools": [{"type": "function", "name": "f"}]},
    {"tool_choice": "required"},
    {"output_modalities": ["video"]},
    {"output_modalities": "audio"},
    {"instructions": 5},
    {"max_output_tokens": 5000},
    {"max_output_tokens": True},
    {"max_output_tokens": "infinite"},
    {"temperature": -1},
    {"temperature": "hot"},
    {"audio": {"output": 5}},
    {"audio": {"output": {"format": 5}}},
    {"audio": {"output": {"format": {"type": "audio/pcmu"}}}},
    {"audio": {"output": {"format": {"rate": 100}}}},
    {"audio": {"output": {"voice": 5}}},
    {"audio": {"output": {"voice": {"id": ""}}}},
    {"audio": {"output": {"voice": ""}}},
    {"audio": {"output": {"speed": 9}}},
    {"audio": {"output": {"speed": False}}},
    {"audio": {"input": {"format": {"rate": 5}}}},
    {"reasoning_budget": -2},
    {"reasoning_budget": "lots"},
    {"reasoning_budget": True},
]
SESSION_R_OK = [
    {},
    {"model": "gpt-realtime"},
    {"model": ""},
    {"tools": [], "tool_choice": "auto"},
    {"tools": None, "tool_choice": "none"},
    {"output_modalities": ["text"], "instructions": "Be brief.", "max_output_tokens": 12},
    {"output_modalities": ["text", "audio"], "max_output_tokens": "inf", "temperature": 1},
    {
        "output_modalities": None,
        "instructions": None,
        "max_output_tokens": None,
        "temperature": None,
    },
    {
        "audio": {
            "output": {
                "format": {"type": "audio/pcm", "rate": 16000},
                "voice": {"id": "v"},
                "speed": 1.5,
            }
        }
    },
    {"audio": {"output": {"voice": "en-us", "format": None}}},
    {"audio": {"input": {"turn_detection": {"create_response": False}}}},
    {"audio": {"input": {"turn_detection": None}}},
    {"reasoning_budget": 64},
    {"reasoning_budget": -1},
]
ITEMS = [  # conversation.item.create items
    {"type": "function_call"},
    {"role": "tool"},
    {"role": "user", "id": 5, "content": [{"type": "input_text", "text": "x"}]},
    {"role": "user", "id": "x" * 65, "content": [{"type": "input_text", "text": "x"}]},
    {"role": "user"},
    {"role": "user", "content": []},
    {"role": "user", "content": "hi"},
    {"role": "user", "content": ["hi"]},
    {"role": "user", "content": [{"type": "output_text", "text": "x"}]},
    {"role": "system", "content": [{"type": "input_audio", "audio": ""}]},
    {"role": "assistant", "content": [{"type": "input_text", "text": "x"}]},
    {"role": "user", "content": [{"type": "input_text", "text": 5}]},
    {"role": "user", "content": [{"type": "input_audio", "transcript": 5}]},
    {"role": "assistant", "content": [{"type": "output_audio", "transcript": ["a"]}]},
    {"role": "assistant", "content": [{"type": "text", "text": {}}]},
]
ITEMS_OK = [
    {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
    {"type": "message", "role": "user", "id": "", "content": [{"type": "input_text"}]},
    {
        "role": "user",
        "id": "mine",
        "content": [
            {"type": "input_audio", "audio": "AAAA"},
            {"type": "input_audio", "transcript": "said"},
            {"type": "input_text", "text": None},
        ],
    },
    {"role": "user", "content": [{"type": "input_audio", "transcript": "", "audio": 5}]},
    {"role": "system", "content": [{"type": "input_text", "text": "sys"}]},
    {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "a"},
            {"type": "output_text", "text": "b"},
            {"type": "output_audio"},
        ],
    },
]
METADATA = [
    5,
    {str(i): "v" for i in range(17)},
    {"k" * 65: "v"},
    {"k": "v" * 513},
    {"k": 5},
    [("a", "b")],
]
METADATA_OK = [None, {}, {"k": "v"}]
AUDIO = [None, 5, "!!", "AAA=", "A" * (15 * 1024 * 1024 * 4 // 3 + 5)]
AUDIO_OK = ["", "AAAA"]
MODALITIES = [["video"], "audio", ["audio", "audio"], []]
MAX_TOKENS = [0, 4097, 1.5, True, "inf ", [1]]


def _outcome(fn) -> dict:
    try:
        result = fn()
    except ProtocolError as exc:
        return {"refused": [exc.message, exc.param, exc.code, exc.type]}
    return {"ok": repr(result)}


def _transcription(body):
    return tc.merge(tc.TranscriptionConfig(model="whisper"), body, {"whisper"})


def _conversation(body):
    config = cc.new_config("model", "whisper")
    return cc.merge(config, body, {"whisper"}, {"model", "gpt-realtime"})


class _NoItems:
    items: list = []


def _item(raw):
    data, audio = ConversationSession._parse_item(_NoItems(), protocol.NewItem.parse(raw))
    return ({**data, "id": "ID" if raw.get("id") in (None, "", 0) else data["id"]}, audio)


CHECKS = {
    "SESSION_T": (SESSION_T + SESSION_T_OK, lambda c: _transcription(c).__dict__),
    "SESSION_R": (
        SESSION_R + SESSION_R_OK,
        lambda c: (lambda n: (n.input.__dict__, n.output.__dict__, n.create_response,
                              n.interrupt_response))(_conversation(c)),
    ),
    "ITEMS": (ITEMS + ITEMS_OK, _item),
    "METADATA": (
        METADATA + METADATA_OK,
        lambda c: protocol.ResponseParams.parse({"metadata": c}).metadata,
    ),
    "AUDIO": (AUDIO + AUDIO_OK, lambda c: len(protocol.decode_audio(c))),
    "MODALITIES": (
        MODALITIES,
        lambda c: protocol.RealtimeSession.parse({"output_modalities": c}).output_modalities,
    ),
    "MAX_TOKENS": (
        MAX_TOKENS,
        lambda c: protocol.ResponseParams.parse({"max_output_tokens": c}).max_output_tokens,
    ),
}  # fmt: skip


@pytest.mark.parametrize("group", sorted(CHECKS))
def test_refusals_and_results_are_what_the_hand_checks_gave(group):
    cases, check = CHECKS[group]
    expected = PINNED["refusals"][group]
    assert len(cases) == len(expected)
    for case, want in zip(cases, expected, strict=True):
        assert _outcome(lambda c=case: check(c)) == want, case


def test_effective_sessions_are_unchanged():
    for n, body in enumerate(SESSION_T_OK):
        assert _transcription(body).to_session("sess_x") == PINNED["sessions"][f"t{n}"]
        protocol.check_server_event(
            {"type": "session.created", "event_id": "e", "session": _transcription(body)
             .to_session("sess_x")}
        )  # fmt: skip
    for n, body in enumerate(SESSION_R_OK):
        session = _conversation(body).to_session("sess_x")
        assert session == PINNED["sessions"][f"r{n}"]
        protocol.check_server_event(
            {"type": "session.updated", "event_id": "e", "session": session}
        )


def test_semantic_vad_is_accepted_echoed_and_mapped_to_the_engine_rule():
    from llamactl import EAGERNESS, semantic_turn

    assert protocol.EAGERNESS_LEVELS == EAGERNESS  # the wire names are the engine's table's
    td = {"type": "semantic_vad", "eagerness": "high"}
    t = _transcription({"audio": {"input": {"turn_detection": td}}})
    assert t.turn_detection == td and t.semantic() == semantic_turn("high")
    session = t.to_session("sess_x")
    protocol.check_server_event({"type": "session.updated", "event_id": "e", "session": session})
    r = _conversation({"audio": {"input": {"turn_detection": {"type": "semantic_vad"}}}})
    assert r.input.turn_detection == {
        "type": "semantic_vad",
        "eagerness": "auto",
        "create_response": True,
        "interrupt_response": True,
    }
    assert r.create_response and r.interrupt_response and r.input.semantic() == semantic_turn()
    protocol.check_server_event(
        {"type": "session.updated", "event_id": "e", "session": r.to_session("sess_x")}
    )
    back = cc.merge(
        r, {"audio": {"input": {"turn_detection": {"type": "server_vad"}}}}, {"w"}, set()
    )
    assert back.input.semantic() is None and back.input.turn_detection["type"] == "server_vad"
    with pytest.raises(ProtocolError) as refused:
        _transcription({"audio": {"input": {"turn_detection": {**td, "eagerness": "eager"}}}})
    assert refused.value.param == "session.audio.input.turn_detection.eagerness"
    off = {"type": "semantic_vad", "create_response": "yes"}
    with pytest.raises(ProtocolError, match="create_response must be a boolean"):
        _conversation({"audio": {"input": {"turn_detection": off}}})
