"""Sessions: audio formats, input transcription, turn detection, audio in and out, the output
fields a session and a response share, and the two session kinds."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BeforeValidator,
    Discriminator,
    Tag,
    ValidationInfo,
    model_validator,
)

from llamactl.core.vad_defaults import (
    SERVER_VAD,
    VAD_PREFIX_PADDING_MS,
    VAD_SILENCE_MS,
    VAD_THRESHOLD,
)

from ._shape import (
    DEFAULT_RATE,
    MAX_OUTPUT_TOKENS,
    MAX_RATE,
    MIN_RATE,
    _check,
    _context,
    _is_int,
    _is_number,
    _object,
    _refuse,
    _Shape,
    _string,
)

__all__ = [
    "AudioFormat",
    "AudioInput",
    "AudioOutput",
    "InputTranscription",
    "RealtimeSession",
    "TranscriptionSession",
    "EAGERNESS_LEVELS",
    "SERVER_VAD",
    "SemanticTurnDetection",
    "TurnDetection",
]


# ---------------------------------------------------------------------- audio formats
class AudioFormat(_Shape):
    """`{"type": "audio/pcm", "rate": R}`: PCM16 LE mono (any R from 8000 to 48000 is an
    extension). Where it is (`at`) and which way it goes word the refusals."""

    at: ClassVar[str] = "session.audio.input.format"
    direction: ClassVar[str] = "input"

    type: Literal["audio/pcm"] = "audio/pcm"
    rate: int = DEFAULT_RATE

    @model_validator(mode="before")
    @classmethod
    def _pcm_only(cls, data: Any) -> Any:
        if isinstance(data, dict):
            kind = data.get("type", "audio/pcm")
            if kind != "audio/pcm":
                verb = "send" if cls.direction == "input" else "use"
                raise _refuse(
                    f"{cls.direction} audio format '{kind}' is not supported; {verb} audio/pcm "
                    "(PCM16 LE mono)",
                    f"{cls.at}.type",
                )
            if "rate" in data:
                rate = data["rate"]
                if not _is_int(rate) or not MIN_RATE <= rate <= MAX_RATE:
                    raise _refuse(
                        f"{cls.at}.rate must be an integer between {MIN_RATE} and {MAX_RATE}, "
                        f"got {rate!r}",
                        f"{cls.at}.rate",
                    )
        return data


class OutputFormat(AudioFormat):
    at = "session.audio.output.format"
    direction = "output"


class ResponseOutputFormat(OutputFormat):
    at = "response.audio.output.format"


# ------------------------------------------------------------------ session: input
def _transcription_model(value: Any, info: ValidationInfo) -> Any:
    ctx = _context(info)
    known = ctx.get("transcribers")
    if known is not None and value not in (None, "") and value not in known:
        raise _refuse(
            f"unknown transcription model '{value}'; this server transcribes with "
            f"'{ctx.get('transcriber', '')}'",
            f"{InputTranscription.at}.model",
        )
    return value


class InputTranscription(_Shape):
    """`audio.input.transcription`: the model is the server's (OpenAI names are accepted)."""

    at: ClassVar[str] = "session.audio.input.transcription"

    model: Annotated[str | None, BeforeValidator(_transcription_model)] = None
    language: Annotated[str | None, _check(_string, f"{at}.language")] = None
    prompt: Annotated[str | None, _check(_string, f"{at}.prompt")] = None


_TD = "session.audio.input.turn_detection"
_VAD_BOUNDS: dict[str, tuple[float, float, float]] = {
    "threshold": (0.0, 1.0, VAD_THRESHOLD),
    "prefix_padding_ms": (0, 5000, VAD_PREFIX_PADDING_MS),
    "silence_duration_ms": (100, 10000, VAD_SILENCE_MS),
}


def _vad(value: Any, key: str) -> Any:
    low, high, default = _VAD_BOUNDS[key]
    got = default if value is None else value
    if not _is_number(got) or not low <= got <= high:
        raise _refuse(f"{_TD}.{key} must be between {low} and {high}, got {got!r}", f"{_TD}.{key}")
    return got if key == "threshold" else int(got)


def _kind_of_vad(value: Any) -> Any:
    if value != "server_vad":
        raise _refuse(
            f"turn detection '{value}' is not supported; use server_vad, semantic_vad or null",
            f"{_TD}.type",
        )
    return value


EAGERNESS_LEVELS = ("low", "medium", "high", "auto")  # OpenAI's; their timings: the engine's


def _eagerness(value: Any, key: str) -> Any:
    got = "auto" if value is None else value
    if got not in EAGERNESS_LEVELS:
        raise _refuse(
            f"{_TD}.eagerness must be one of {', '.join(EAGERNESS_LEVELS)}, got {got!r}",
            f"{_TD}.eagerness",
        )
    return got


class TurnDetection(_Shape):
    """`server_vad`: a turn ends after `silence_duration_ms` of silence. In transcription
    sessions the conversation settings (`create_response`...) are kept as sent and mean
    nothing."""

    omittable = frozenset({"create_response", "interrupt_response", "idle_timeout_ms"})

    type: Annotated[Literal["server_vad"], BeforeValidator(_kind_of_vad)] = "server_vad"
    threshold: Annotated[int | float, _check(_vad, "threshold")] = VAD_THRESHOLD
    prefix_padding_ms: Annotated[int, _check(_vad, "prefix_padding_ms")] = VAD_PREFIX_PADDING_MS
    silence_duration_ms: Annotated[int, _check(_vad, "silence_duration_ms")] = VAD_SILENCE_MS
    create_response: Any = None
    interrupt_response: Any = None
    idle_timeout_ms: Any = None


def _boolean(value: Any, key: str) -> Any:
    if not isinstance(value, bool):
        raise _refuse(f"{_TD}.{key} must be a boolean", f"{_TD}.{key}")
    return value


class ConversationTurnDetection(TurnDetection):
    """Conversation sessions: a committed turn is answered (`create_response`) and speech
    over an answer interrupts it (`interrupt_response`); left out, each keeps its value."""

    create_response: Annotated[bool | None, _check(_boolean, "create_response")] = None
    interrupt_response: Annotated[bool | None, _check(_boolean, "interrupt_response")] = None


class SemanticTurnDetection(_Shape):
    """`semantic_vad`: a turn ends when Smart Turn judges the speaker finished; `eagerness`
    (low / medium / high / auto = medium) says how soon, and bounds the wait (8 / 4 / 2 s)."""

    omittable = frozenset({"create_response", "interrupt_response"})

    type: Literal["semantic_vad"] = "semantic_vad"
    eagerness: Annotated[
        Literal["low", "medium", "high", "auto"], _check(_eagerness, "eagerness")
    ] = "auto"
    create_response: Any = None
    interrupt_response: Any = None


class ConversationSemanticTurnDetection(SemanticTurnDetection):
    """`semantic_vad` in conversation sessions (`create_response`, `interrupt_response` as in
    `ConversationTurnDetection`)."""

    create_response: Annotated[bool | None, _check(_boolean, "create_response")] = None
    interrupt_response: Annotated[bool | None, _check(_boolean, "interrupt_response")] = None


def _turn_kind(value: Any) -> str:
    """semantic_vad, or server_vad (whose model words the refusal of any other type)."""
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return "semantic_vad" if kind == "semantic_vad" else "server_vad"


AnyTurnDetection = Annotated[
    Annotated[TurnDetection, Tag("server_vad")]
    | Annotated[SemanticTurnDetection, Tag("semantic_vad")],
    Discriminator(_turn_kind),
]
ConversationAnyTurnDetection = Annotated[
    Annotated[ConversationTurnDetection, Tag("server_vad")]
    | Annotated[ConversationSemanticTurnDetection, Tag("semantic_vad")],
    Discriminator(_turn_kind),
]


class AudioInput(_Shape):
    """`audio.input`. `noise_reduction` is accepted and not acted on (reported as null)."""

    format: Annotated[AudioFormat | None, _check(_object, f"{AudioFormat.at}")] = None
    transcription: Annotated[InputTranscription | None, _check(_object, InputTranscription.at)] = (
        None
    )
    turn_detection: Annotated[
        AnyTurnDetection | None, _check(_object, _TD, "an object or null")
    ] = None
    noise_reduction: Any = None


class ConversationAudioInput(AudioInput):
    turn_detection: Annotated[
        ConversationAnyTurnDetection | None, _check(_object, _TD, "an object or null")
    ] = None


# ----------------------------------------------------------------- session: output
def _voice(value: Any, param: str) -> Any:
    if value is None:
        return None
    voice = value.get("id") if isinstance(value, dict) else value
    if not isinstance(voice, str) or not voice:
        raise _refuse(f"{param} must be a voice name", param)
    return voice


def _speed(value: Any, param: str) -> Any:
    if value is None:
        return None
    if not _is_number(value) or not 0.25 <= value <= 4:
        raise _refuse(f"{param} must be between 0.25 and 4, got {value!r}", param)
    return float(value)


class AudioOutput(_Shape):
    """`audio.output` of a session: spoken answers (eSpeak NG voices; OpenAI's names map to
    them); `{"id": name}` voices are read as their name."""

    format: Annotated[OutputFormat | None, _check(_object, OutputFormat.at)] = None
    voice: Annotated[str | None, _check(_voice, "session.audio.output.voice")] = None
    speed: Annotated[float | None, _check(_speed, "session.audio.output.speed")] = None


class ResponseAudioOutput(AudioOutput):
    """`response.audio.output`: one response's voice (the response object omits speed)."""

    omittable = frozenset({"speed"})

    format: Annotated[ResponseOutputFormat | None, _check(_object, ResponseOutputFormat.at)] = None
    voice: Annotated[str | None, _check(_voice, "response.audio.output.voice")] = None
    speed: Annotated[float | None, _check(_speed, "response.audio.output.speed")] = None


# ------------------------------------------------- output fields: sessions and responses
Modality = Literal["text", "audio"]


def _modalities(value: Any, param: str) -> Any:
    if value is None or value in (["text"], ["audio"]):
        return value
    if isinstance(value, list) and sorted(value) == ["audio", "text"]:
        return ["audio"]  # OpenAI: audio output always carries its text transcript
    raise _refuse(f'{param} must be ["text"] or ["audio"], got {value!r}', param)


def _max_tokens(value: Any, where: str) -> Any:
    if value is None or value == "inf":
        return "inf"
    if not _is_int(value) or not 1 <= value <= MAX_OUTPUT_TOKENS:
        raise _refuse(
            f"{where}.max_output_tokens must be an integer from 1 to {MAX_OUTPUT_TOKENS} or "
            f"'inf', got {value!r}",
            f"{where}.max_output_tokens",
        )
    return value


def _temperature(value: Any, where: str) -> Any:
    if value is None:
        return None
    if not _is_number(value) or not 0.0 <= value <= 2.0:
        raise _refuse(
            f"{where}.temperature must be between 0 and 2, got {value!r}", f"{where}.temperature"
        )
    return float(value)


def _reasoning_budget(value: Any, where: str) -> Any:
    """A llamactl extension: thinking tokens before the engine ends the thinking itself
    (-1: no bound; null: the server's --reasoning-budget). Voice cannot wait for long thoughts."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < -1:
        raise _refuse(
            f"{where}.reasoning_budget must be an integer of at least -1 (-1: no bound), "
            f"got {value!r}",
            f"{where}.reasoning_budget",
        )
    return value


def _no_tools(value: Any, param: str, what: str) -> Any:
    if value not in (None, [], "auto", "none"):
        raise _refuse(
            f"function tools are not supported in realtime {what} yet",
            param,
            code="unsupported_feature",
        )
    return value


def _include(value: Any) -> Any:
    value = value or []
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise _refuse("session.include must be a list of strings", "session.include")
    return value


# ------------------------------------------------------------------------- sessions
class TranscriptionAudio(_Shape):
    input: Annotated[AudioInput | None, _check(_object, "session.audio.input")] = None


class TranscriptionSession(_Shape):
    """`session.type: "transcription"`: a `session.update` body (partial) or, sent by the
    server, the whole effective session."""

    object: Literal["realtime.session"] = "realtime.session"
    type: Literal["transcription"] | None = "transcription"
    id: str | None = None
    audio: Annotated[TranscriptionAudio | None, _check(_object, "session.audio")] = None
    include: Annotated[list[str] | None, BeforeValidator(_include)] = None


class ConversationAudio(_Shape):
    input: Annotated[ConversationAudioInput | None, _check(_object, "session.audio.input")] = None
    output: Annotated[AudioOutput | None, _check(_object, "session.audio.output")] = None


def _session_model(value: Any, info: ValidationInfo) -> Any:
    ctx = _context(info)
    known = ctx.get("models")
    if known is not None and value not in (None, "") and value not in known:
        raise _refuse(
            f"unknown model '{value}'; this server answers with '{ctx.get('model', '')}'",
            "session.model",
        )
    return value


class RealtimeSession(_Shape):
    """`session.type: "realtime"`, a conversation: speech (or text) in, answers out.
    `temperature` and `reasoning_budget` are llamactl extensions (null: the server's default)."""

    object: Literal["realtime.session"] = "realtime.session"
    type: Literal["realtime"] | None = "realtime"
    id: str | None = None
    audio: Annotated[ConversationAudio | None, _check(_object, "session.audio")] = None
    include: Annotated[list[str] | None, BeforeValidator(_include)] = None
    model: Annotated[str | None, BeforeValidator(_session_model)] = None
    tools: Annotated[
        list[Any] | None, _check(_no_tools, "session.tools", "conversation sessions")
    ] = None
    tool_choice: Annotated[
        str | None, _check(_no_tools, "session.tool_choice", "conversation sessions")
    ] = None
    output_modalities: Annotated[
        list[Modality] | None, _check(_modalities, "session.output_modalities")
    ] = None
    instructions: Annotated[str | None, _check(_string, "session.instructions")] = None
    max_output_tokens: Annotated[int | Literal["inf"] | None, _check(_max_tokens, "session")] = None
    temperature: Annotated[float | None, _check(_temperature, "session")] = None
    reasoning_budget: Annotated[int | None, _check(_reasoning_budget, "session")] = None
    tracing: Any = None
    truncation: Any = None


def _session_kind(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return "transcription" if kind == "transcription" else "realtime"


Session = Annotated[
    Annotated[RealtimeSession, Tag("realtime")]
    | Annotated[TranscriptionSession, Tag("transcription")],
    Discriminator(_session_kind),
]
