"""Loading the model of a single-model server, and choosing once what it serves.

A chat model gets the text engine and the chat model over it; a decision model gets a
`DecisionEngine` (one forward pass per question, no text generation: MiniCPM-OCR-Jev has no
LM head) and nothing else, so a decision model can never silently generate text. The choice
is read from the GGUF header alone, before anything loads. The speech services (transcription,
speech) come from the settings and are made on first use (`OnDemand`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from llamactl import (
    DEFAULT_SLOT_CTX,
    AudioService,
    ChatModel,
    CoreShare,
    DecisionEngine,
    Embedder,
    EmbedderConfig,
    Engine,
    LlamactlError,
    Model,
    Synthesizer,
    decision_type_of,
    find_mmproj,
    has_rank_head,
    load_decision_model,
    open_mtmd_synthesizer,
    open_synthesizer,
    read_gguf_info,
)
from llamactl.config import Settings
from llamactl.engine_settings import chat_template, decision_config, model_load, open_engine

__all__ = [
    "Loaded",
    "is_decision_model",
    "is_encoder_model",
    "load_chat",
    "load_decisions",
    "load_embedder_only",
    "open_speech",
    "open_transcription",
    "text_engine",
]

log = logging.getLogger("llamactl.server")


@dataclass(frozen=True)
class Loaded:
    """The services of one loaded model; a service the model does not offer is None."""

    engine: Engine | None = None  # text generation (chat models)
    chat: ChatModel | None = None  # the chat template over `engine`
    decisions: DecisionEngine | None = None  # typed questions (decision models)
    embeddings: Embedder | None = None  # vectors or rank scores (--embedding, --rerank)


def is_decision_model(path: Path) -> bool:
    """From the GGUF header alone: no model load."""
    try:
        return decision_type_of(read_gguf_info(path)) is not None
    except LlamactlError:
        return False  # not readable here: the chat loader reports it


# llama.cpp's architectures without a KV cache (llama_model::create_memory gives them none): a
# text engine cannot run them; with --embedding / --rerank they serve embeddings or scores
ENCODER_ARCHITECTURES = frozenset(
    {
        "bert",
        "jina-bert-v2",
        "jina-bert-v3",
        "nomic-bert",
        "nomic-bert-moe",
        "neo-bert",
        "eurobert",
        "modern-bert",
        "gemma-embedding",
        "t5encoder",
    }
)
# Rank scores: inputs (query, document pairs) decoded together, at most this many per decode
RANK_SEQUENCES = 32


def is_encoder_model(path: Path) -> bool:
    """From the GGUF header alone: an encoder (BERT and its kind), which generates no text."""
    try:
        return read_gguf_info(path).architecture in ENCODER_ARCHITECTURES
    except LlamactlError:
        return False  # not readable here: the chat loader reports it


def load_chat(
    settings: Settings, make_engine: Callable[[], Engine], mmproj: Path | None = None
) -> Loaded:
    """The engine `make_engine` builds and a chat model over it, with the settings' template
    file if one is set (read first: a missing file fails before the model loads), and the
    projector `mmproj` for images and audio in chat."""
    template = chat_template(settings)
    engine = make_engine()
    try:
        if mmproj is not None:
            engine.attach_projector(mmproj)
            log.info("mmproj %s: images and audio in chat", mmproj.name)
        chat = ChatModel(engine, template=template)
        ranks = settings.rerank and _rank_head(engine.model)
        embeddings = (
            open_embeddings(settings, engine.model, engine.n_ctx_seq, ranks=ranks)
            if settings.embedding or ranks
            else None
        )
        return Loaded(engine=engine, chat=chat, embeddings=embeddings)
    except BaseException:
        engine.close()
        engine.model.close()
        raise


def load_embedder_only(settings: Settings, model_path: Path) -> Loaded:
    """An encoder model (`is_encoder_model`) with --embedding or --rerank: its embedding
    context and nothing else (llama-server serves such a model the same way)."""
    model = Model(model_path, load=model_load(settings))
    try:
        n_ctx = settings.n_ctx or min(model.info.n_ctx_train, DEFAULT_SLOT_CTX)
        ranks = settings.rerank and _rank_head(model)
        return Loaded(embeddings=open_embeddings(settings, model, n_ctx, ranks=ranks))
    except BaseException:
        model.close()
        raise


def _rank_head(model: Model) -> bool:
    """--rerank's check: without a rank head the model is served without reranking (its
    /v1/rerank answers why)."""
    if has_rank_head(model):
        return True
    log.warning("--rerank: %s has no rank head (cls / cls.output); not reranking", model.path.name)
    return False


def open_embeddings(settings: Settings, model: Model, n_ctx: int, *, ranks: bool) -> Embedder:
    """A context of `model` for embeddings (`--embedding`) of `n_ctx` tokens (a chat engine's:
    one slot's), with the settings' pooling; `ranks` (--rerank, a model with a rank head)
    makes it rank pooling, several inputs a decode."""
    config = EmbedderConfig(
        n_ctx=n_ctx,
        n_ubatch=settings.ubatch_size,
        n_threads=settings.threads,
        n_seq_max=RANK_SEQUENCES if ranks else 1,
        pooling="rank" if ranks else settings.pooling,
    )
    return Embedder(model, config)


def text_engine(settings: Settings, model_path: Path) -> Engine:
    """The batched generation engine over the model at `model_path` (the settings mapped by
    the one Settings -> EngineConfig mapping)."""
    return open_engine(settings, model_path)


def load_decisions(
    settings: Settings,
    model_path: Path,
    mmproj: Path | None,
    model_id: str,
    *,
    find_projector: bool = True,
) -> Loaded:
    """The decision engine over the model at `model_path`, with `mmproj` (default, unless
    `find_projector` is off: the `mmproj-<model file>` beside it) as its projector."""
    s = settings
    if mmproj is None and find_projector:
        mmproj = find_mmproj(model_path)
    dm = load_decision_model(model_path, mmproj=mmproj, n_threads=s.threads)
    for note in dm.notes:
        log.info("%s", note)
    config = decision_config(s)
    try:
        engine = DecisionEngine(dm, config)
    except BaseException:
        dm.close()
        raise
    log.info(
        "decision model %s (%s), %d slots, at most %d options per question%s",
        model_id,
        dm.dtype.name,
        config.n_parallel,
        engine.max_options,
        f", mmproj {dm.projector.path.name}" if dm.projector else "",
    )
    return Loaded(decisions=engine)


def open_transcription(
    settings: Settings, llm_busy: Callable[[], bool], cores: CoreShare | None = None
) -> AudioService:
    """The speech-to-text service of `/v1/audio/transcriptions` and `/v1/realtime` (its model
    loads on first use); its optional work keeps off the cores while `llm_busy()`, a voice
    turn's goes first (`cores`)."""
    return AudioService(
        settings.transcribe_model,
        mmproj=settings.transcribe_mmproj,
        threads=settings.transcribe_threads or settings.threads,
        llm_busy=llm_busy,
        cores=cores,
    )


def open_speech(settings: Settings) -> Synthesizer:
    """eSpeak NG, or the llama.cpp TTS model of the settings (`tts_model`, `tts_mmproj`); a
    model that cannot speak raises CannotSpeakError (HTTP 501)."""
    if settings.tts_model is None:
        return open_synthesizer()
    return open_mtmd_synthesizer(
        settings.tts_model, settings.tts_mmproj, threads=settings.threads or 0
    )
