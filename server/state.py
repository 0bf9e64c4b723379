"""What every route shares: settings, the loaded model's services, live completions.

The model loads on a background thread so `/health` can answer 503 while it loads,
as llama-server does. The loader chooses once what the model serves: `chat` and its `engine`
for a chat model, `decisions` for a decision model; the others stay None, and a route that
needs one asks through `require_chat` / `require_decisions`, which answer the spec's 501.
`transcription` and `speech` are made from the settings on first use. An API family keeps its own
state (the Responses store, the live Realtime sessions) through `family_state`, so this module
imports no family.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from llamactl import (
    AudioService,
    CannotSpeakError,
    ChatModel,
    ChatStream,
    CoreShare,
    DecisionEngine,
    Embedder,
    Engine,
    Model,
    Synthesizer,
)
from llamactl.config import Settings
from llamactl.engine_settings import chat_template_kwargs

from .loader import (
    Loaded,
    is_decision_model,
    is_encoder_model,
    load_chat,
    load_decisions,
    load_embedder_only,
    open_speech,
    open_transcription,
    text_engine,
)
from .on_demand import OnDemand
from .services import NOT_A_DECISION_MODEL, not_generating, not_supported, require

__all__ = ["Metrics", "ServerState"]

log = logging.getLogger("llamactl.server")

T = TypeVar("T")


@dataclass
class Metrics:
    """Counters for /metrics that the engine does not keep itself."""

    started: float = field(default_factory=time.time)
    http_requests: dict[str, int] = field(default_factory=dict)
    completions: int = 0

    def count_request(self, route: str) -> None:
        self.http_requests[route] = self.http_requests.get(route, 0) + 1


class ServerState:
    """The single-model server's state (an `AppState`). `engine_factory` replaces the text
    engine's construction (tests); the model is then always served as a chat model."""

    def __init__(
        self,
        settings: Settings,
        model_path: Path,
        *,
        mmproj: Path | None = None,
        find_mmproj: bool = True,
        engine_factory: Callable[[ServerState], Engine] | None = None,
    ) -> None:
        self.settings = settings
        self.model_path = model_path
        # the model's projector: images and audio in chat, or a decision model's (default
        # for those, unless `find_mmproj` is off (--no-mmproj): the one found beside it)
        self.mmproj = mmproj
        self.find_mmproj = find_mmproj
        # llama-server's `--alias a,b,c`: every alias names the model; the id is the first
        # in sorted order (llama-server keeps them in a std::set)
        self.aliases = sorted({a.strip() for a in (settings.alias or "").split(",") if a.strip()})
        self.model_id = self.aliases[0] if self.aliases else model_path.stem
        self.draining = False  # a graceful stop has begun: /health answers 503
        self.api_keys: list[str] = settings.resolved_api_keys()
        self.template_kwargs = chat_template_kwargs(settings)  # --chat-template-kwargs
        self.metrics = Metrics()
        self.engine: Engine | None = None
        self.chat: ChatModel | None = None
        self.decisions: DecisionEngine | None = None
        self.embeddings: Embedder | None = None  # with --embedding or --rerank
        # how speech and the language model take turns on the cores (llamactl.engine.cores)
        self.cores = CoreShare()
        self.transcription: OnDemand[AudioService] = OnDemand(
            lambda: open_transcription(settings, self._llm_busy, self.cores), AudioService.close
        )
        self.speech: OnDemand[Synthesizer] = OnDemand(
            lambda: open_speech(settings), Synthesizer.close, remembered=(CannotSpeakError,)
        )
        self.load_error: str | None = None
        self.loaded_at: float | None = None  # wall clock, once the model is in
        self.load_seconds: float | None = None
        self.last_used = time.monotonic()  # a completion began or ended (`ps` idle time)
        # called (on the loading thread) with the error when the model cannot load; `serve`
        # stops then and exits 1, as llama-server does, rather than answering 503 for ever
        self.on_load_failure: Callable[[str], None] | None = None
        self._families: dict[type, object] = {}
        self._families_lock = threading.Lock()
        self._engine_factory = engine_factory or _default_engine
        self._live: dict[str, list[ChatStream]] = {}
        self._live_lock = threading.Lock()
        self._loader: threading.Thread | None = None

    # ------------------------------------------------------------- loading
    @property
    def ready(self) -> bool:
        return self.chat is not None or self.decisions is not None or self._embedder_only

    @property
    def _embedder_only(self) -> bool:
        return self.engine is None and self.embeddings is not None

    def start_loading(self) -> None:
        self._loader = threading.Thread(target=self._load, name="llamactl-load", daemon=True)
        self._loader.start()

    def wait_loaded(self, timeout: float | None = None) -> None:
        if self._loader is not None:
            self._loader.join(timeout)

    def _load(self) -> None:
        try:
            t0 = time.perf_counter()
            self._install(self._load_services())
            self.load_seconds = time.perf_counter() - t0
            self.loaded_at = time.time()
            log.info(
                "model %s ready in %.1f s%s",
                self.model_id,
                self.load_seconds,
                self._context_note(),
            )
        except Exception as exc:  # surfaced by /health and every route
            log.error("could not load the model: %s", exc)
            self.load_error = str(exc)
            if self.on_load_failure is not None:
                self.on_load_failure(self.load_error)

    def _context_note(self) -> str:
        """What each slot holds, so a user whose agent sends long prompts sees it at start."""
        engine = self.engine
        if engine is None:
            return ""
        return (
            f": {engine.config.n_parallel} slots of {engine.n_ctx_slot} tokens each "
            f"(trained on {engine.model.info.n_ctx_train}; -c and -np change it)"
        )

    def _load_services(self) -> Loaded:
        if self._engine_factory is _default_engine and is_decision_model(self.model_path):
            return load_decisions(
                self.settings,
                self.model_path,
                self.mmproj,
                self.model_id,
                find_projector=self.find_mmproj,
            )
        wants_embedder = self.settings.embedding or self.settings.rerank
        if wants_embedder and is_encoder_model(self.model_path):
            return load_embedder_only(self.settings, self.model_path)
        return load_chat(self.settings, lambda: self._engine_factory(self), self.mmproj)

    def _install(self, loaded: Loaded) -> None:
        # chat last: `ready` turns true once everything it needs is in place
        self.engine, self.decisions = loaded.engine, loaded.decisions
        if loaded.engine is not None:
            loaded.engine.cores = self.cores
        self.embeddings = loaded.embeddings
        self.chat = loaded.chat

    def close(self) -> None:
        self.wait_loaded()
        self.stop_generating()
        if self.embeddings is not None:
            self.embeddings.close()  # before the model it reads
            if self.engine is None:
                self.embeddings.model.close()  # an encoder's, loaded for it alone
        if self.engine is not None:
            self.engine.model.close()
        if self.decisions is not None:
            self.decisions.dm.close()
        self.engine = self.chat = self.decisions = self.embeddings = None
        self.transcription.close()
        self.speech.close()

    # ------------------------------------------------------------- services
    def family_state(self, kind: type[T]) -> T:
        """The one `kind()` of this server (made on first use, from any thread): state that
        only one API family reads lives with it, not in this class."""
        with self._families_lock:
            found = self._families.get(kind)
            if found is None:
                found = self._families[kind] = kind()
        assert isinstance(found, kind)
        return found

    def require_chat(self) -> ChatModel:
        """The chat model, or the 501 of a model that does not generate text."""
        decision_type = self.decisions.decision_type if self.decisions is not None else None
        return require(self.chat, not_generating(self.model_id, decision_type))

    def require_text_engine(self) -> Engine:
        """The text generation engine, or the same 501 as `require_chat`."""
        return self.require_chat().engine

    def require_text_model(self) -> Model:
        """The loaded model that reads text (tokenizes): the chat engine's, or an encoder's
        served for embeddings alone; else the same 501 as `require_chat`."""
        if self.engine is None and self.embeddings is not None:
            return self.embeddings.model
        return self.require_text_engine().model

    def require_embeddings(self) -> Embedder:
        """The embedding context, or llama-server's 501 naming the flag that turns it on."""
        return require(
            self.embeddings,
            "This server does not support embeddings. Start it with `--embeddings`",
        )

    def require_rerank(self) -> Embedder:
        """The embedding context with rank pooling, or a 501: llama-server's, naming the flag,
        without --rerank; with it, the model's missing rank head."""
        embedder = self.embeddings
        if embedder is not None and embedder.ranks:
            return embedder
        if not self.settings.rerank:
            raise not_supported(
                "This server does not support reranking. Start it with `--rerank`"
                " (alias `--reranking`)"
            )
        raise not_supported(
            f"This server does not support reranking: '{self.model_id}' has no rank head"
            " (no `cls` / `cls.output` tensor); `--rerank` needs a reranker model"
        )

    def require_decisions(self) -> DecisionEngine:
        """The decision engine, or the spec's 501 for a model that is not a decision model."""
        return require(self.decisions, NOT_A_DECISION_MODEL)

    @property
    def scheduler(self) -> Engine | DecisionEngine | None:
        """Whichever engine is loaded: its slots and counters are what /metrics reports."""
        return self.engine or self.decisions

    def _llm_busy(self) -> bool:
        """The loaded model is decoding or has work queued (speech work then yields)."""
        engine = self.scheduler
        return engine is not None and (engine.busy_slots > 0 or engine.queue_depth > 0)

    # ------------------------------------------------------------- stopping
    @property
    def busy_slots(self) -> int:
        return self.engine.busy_slots if self.engine is not None else 0

    def drain(self) -> bool:
        """Only text generations finish gracefully (a decision is one forward pass)."""
        self.draining = True
        if self.engine is None:
            return False
        self.engine.drain()
        return True

    def stop_generating(self) -> None:
        """Open streams get EngineClosedError, pending decisions fail; the models stay."""
        if self.engine is not None:
            self.engine.close()
        if self.decisions is not None:
            self.decisions.close()

    # ---------------------------------------------- live completions (control)
    def register(self, completion_id: str, stream: ChatStream) -> None:
        with self._live_lock:
            self._live.setdefault(completion_id, []).append(stream)
            self.last_used = time.monotonic()

    def unregister(self, completion_id: str, stream: ChatStream) -> None:
        with self._live_lock:
            streams = self._live.get(completion_id)
            if streams and stream in streams:
                streams.remove(stream)
                if not streams:
                    del self._live[completion_id]
            self.last_used = time.monotonic()

    def in_flight(self) -> int:
        """Completions streaming now."""
        with self._live_lock:
            return sum(len(streams) for streams in self._live.values())

    def live(self, completion_id: str) -> list[ChatStream]:
        with self._live_lock:
            return list(self._live.get(completion_id, ()))


def _default_engine(state: ServerState) -> Engine:
    return text_engine(state.settings, state.model_path)
