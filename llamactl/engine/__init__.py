"""The engine: the only package that talks to llama.cpp (text, chat, speech, decisions).

Front ends import what they need from here (or from `llamactl`), never from the modules below;
names load on first use, so importing this package costs nothing. See docs/engine.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llamactl.core.lazy import lazy_exports

_EXPORTS: dict[str, tuple[str, ...]] = {
    # generation
    "llamactl.engine.engine": ("Engine", "EngineConfig", "GenerationRequest"),
    "llamactl.engine.stream": ("GenerationStream",),
    "llamactl.engine.model": ("Model",),
    "llamactl.engine.embeddings": ("Embedder", "EmbedderConfig", "normalize"),
    "llamactl.engine.rerank": ("has_rank_head", "rerank_template", "rerank_tokens"),
    "llamactl.engine.infill": ("FimTokens", "infill_tokens"),
    "llamactl.engine.grammar": ("json_grammar", "json_schema_grammar"),
    "llamactl.engine.speculative": ("parse_spec_types",),
    "llamactl.engine.lora": ("check_lora_adapter",),
    "llamactl.engine.limits": ("DEFAULT_SLOT_CTX",),
    "llamactl.engine.quantize": ("QUANT_TYPES", "quantize_gguf"),
    "llamactl.engine.cores": ("CoreShare", "StageTotals"),
    # chat
    "llamactl.engine.chat.model": ("ChatModel", "ChatRequest", "ChatStream", "RenderedChat"),
    "llamactl.engine.media_prompt": ("MediaInput", "UNSUPPORTED_MEDIA_MESSAGES"),
    "llamactl.engine.image_header": ("IMAGE_FORMATS", "ImageHeader", "read_image_header"),
    # events
    "llamactl.engine.types": (
        "ChatEvent",
        "ContentDelta",
        "Done",
        "Event",
        "FinishReason",
        "PromptProgress",
        "ReasoningDelta",
        "ReasoningFormat",
        "SamplingParams",
        "SlotInfo",
        "SlotJob",
        "TextDelta",
        "Timings",
        "TokenLogprob",
        "ToolCallDelta",
        "Usage",
    ),
    # speech in
    "llamactl.engine.audio": (
        "EAGERNESS",
        "AudioService",
        "Cleared",
        "Committed",
        "Completed",
        "Final",
        "Partial",
        "Tentative",
        "Segment",
        "SemanticTurn",
        "SmartTurn",
        "SpeechStarted",
        "SpeechStopped",
        "StreamEvent",
        "StreamFailed",
        "Transcriber",
        "TranscriptionStream",
        "VadConfig",
        "semantic_turn",
    ),
    "llamactl.engine.audio.decode": ("read_audio",),
    "llamactl.engine.audio.load": ("EMBEDDED_ALIASES",),
    "llamactl.engine.audio.pcm": ("StreamResampler", "resample", "to_float32", "to_pcm16"),
    # speech out
    "llamactl.engine.audio.synth": (
        "Synthesizer",
        "Voice",
        "as_float32",
        "as_int16",
        "open_synthesizer",
    ),
    "llamactl.engine.audio.synth_mtmd": ("open_mtmd_synthesizer",),
    "llamactl.engine.audio.synth_encode": ("MEDIA_TYPES", "encode", "pcm_bytes", "wav_header"),
    # decisions
    "llamactl.engine.decision": (
        "DecisionConfig",
        "DecisionEngine",
        "DecisionModel",
        "DecisionRequest",
        "DecisionResult",
        "decision_type_of",
        "find_mmproj",
        "load_decision_model",
    ),
}

if TYPE_CHECKING:
    from llamactl.engine.audio import (
        EAGERNESS,
        AudioService,
        Cleared,
        Committed,
        Completed,
        Final,
        Partial,
        Segment,
        SemanticTurn,
        SmartTurn,
        SpeechStarted,
        SpeechStopped,
        StreamEvent,
        StreamFailed,
        Tentative,
        Transcriber,
        TranscriptionStream,
        VadConfig,
        semantic_turn,
    )
    from llamactl.engine.audio.decode import read_audio
    from llamactl.engine.audio.load import EMBEDDED_ALIASES
    from llamactl.engine.audio.pcm import StreamResampler, resample, to_float32, to_pcm16
    from llamactl.engine.audio.synth import (
        Synthesizer,
        Voice,
        as_float32,
        as_int16,
        open_synthesizer,
    )
    from llamactl.engine.audio.synth_encode import MEDIA_TYPES, encode, pcm_bytes, wav_header
    from llamactl.engine.audio.synth_mtmd import open_mtmd_synthesizer
    from llamactl.engine.chat.model import ChatModel, ChatRequest, ChatStream, RenderedChat
    from llamactl.engine.cores import CoreShare, StageTotals
    from llamactl.engine.decision import (
        DecisionConfig,
        DecisionEngine,
        DecisionModel,
        DecisionRequest,
        DecisionResult,
        decision_type_of,
        find_mmproj,
        load_decision_model,
    )
    from llamactl.engine.embeddings import Embedder, EmbedderConfig, normalize
    from llamactl.engine.engine import Engine, EngineConfig, GenerationRequest
    from llamactl.engine.grammar import json_grammar, json_schema_grammar
    from llamactl.engine.image_header import IMAGE_FORMATS, ImageHeader, read_image_header
    from llamactl.engine.infill import FimTokens, infill_tokens
    from llamactl.engine.limits import DEFAULT_SLOT_CTX
    from llamactl.engine.lora import check_lora_adapter
    from llamactl.engine.media_prompt import UNSUPPORTED_MEDIA_MESSAGES, MediaInput
    from llamactl.engine.model import Model
    from llamactl.engine.quantize import QUANT_TYPES, quantize_gguf
    from llamactl.engine.rerank import has_rank_head, rerank_template, rerank_tokens
    from llamactl.engine.speculative import parse_spec_types
    from llamactl.engine.stream import GenerationStream
    from llamactl.engine.types import (
        ChatEvent,
        ContentDelta,
        Done,
        Event,
        FinishReason,
        PromptProgress,
        ReasoningDelta,
        ReasoningFormat,
        SamplingParams,
        SlotInfo,
        SlotJob,
        TextDelta,
        Timings,
        TokenLogprob,
        ToolCallDelta,
        Usage,
    )

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

__all__ = [
    "DEFAULT_SLOT_CTX",
    "EAGERNESS",
    "EMBEDDED_ALIASES",
    "IMAGE_FORMATS",
    "MEDIA_TYPES",
    "QUANT_TYPES",
    "UNSUPPORTED_MEDIA_MESSAGES",
    "AudioService",
    "ChatEvent",
    "ChatModel",
    "ChatRequest",
    "ChatStream",
    "CoreShare",
    "Cleared",
    "Committed",
    "Completed",
    "ContentDelta",
    "DecisionConfig",
    "DecisionEngine",
    "DecisionModel",
    "DecisionRequest",
    "DecisionResult",
    "Done",
    "Embedder",
    "EmbedderConfig",
    "Engine",
    "EngineConfig",
    "Event",
    "FimTokens",
    "Final",
    "FinishReason",
    "GenerationRequest",
    "GenerationStream",
    "ImageHeader",
    "MediaInput",
    "Model",
    "Partial",
    "Tentative",
    "PromptProgress",
    "ReasoningDelta",
    "ReasoningFormat",
    "RenderedChat",
    "SamplingParams",
    "Segment",
    "SemanticTurn",
    "SlotInfo",
    "SlotJob",
    "SmartTurn",
    "SpeechStarted",
    "SpeechStopped",
    "StageTotals",
    "StreamEvent",
    "StreamFailed",
    "StreamResampler",
    "Synthesizer",
    "TextDelta",
    "Timings",
    "TokenLogprob",
    "ToolCallDelta",
    "Transcriber",
    "TranscriptionStream",
    "Usage",
    "VadConfig",
    "Voice",
    "as_float32",
    "as_int16",
    "check_lora_adapter",
    "decision_type_of",
    "encode",
    "find_mmproj",
    "has_rank_head",
    "infill_tokens",
    "json_grammar",
    "json_schema_grammar",
    "load_decision_model",
    "normalize",
    "open_mtmd_synthesizer",
    "open_synthesizer",
    "parse_spec_types",
    "pcm_bytes",
    "quantize_gguf",
    "semantic_turn",
    "read_audio",
    "read_image_header",
    "rerank_template",
    "rerank_tokens",
    "resample",
    "to_float32",
    "to_pcm16",
    "wav_header",
]
