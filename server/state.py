"""What every route shares: settings, the loaded model, its engine, live completions.

The model loads on a background thread so `/health` can answer 503 while it loads,
as llama-server does.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from llamactl import ChatModel, ChatStream, Engine, EngineConfig, Model
from llamactl.config import Settings
from llamactl.models import resolve_model

log = logging.getLogger("llamactl.server")


@dataclass
class Metrics:
    """Counters for /metrics that the engine does not keep itself."""

    started: float = field(default_factory=time.time)
    http_requests: dict[str, int] = field(default_factory=dict)
    completions: int = 0

    def count_request(self, route: str) -> None:
        self.http_requests[route] = self.http_requests.get(route, 0) + 1


class ServerState:
    def __init__(
        self,
        settings: Settings,
        model_path: Path,
        *,
        engine_factory: Callable[[ServerState], Engine] | None = None,
    ) -> None:
        self.settings = settings
        self.model_path = model_path
        self.model_id = settings.alias or model_path.stem
        self.api_keys: list[str] = settings.resolved_api_keys()
        self.metrics = Metrics()
        self.engine: Engine | None = None
        self.chat: ChatModel | None = None
        self.decisions = None  # a DecisionEngine when the model is a decision model
        self.load_error: str | None = None
        self._engine_factory = engine_factory or _default_engine
        self._live: dict[str, list[ChatStream]] = {}
        self._live_lock = threading.Lock()
        self._loader: threading.Thread | None = None

    # ------------------------------------------------------------- loading
    @property
    def ready(self) -> bool:
        return self.chat is not None

    def start_loading(self) -> None:
        self._loader = threading.Thread(target=self._load, name="llamactl-load", daemon=True)
        self._loader.start()

    def wait_loaded(self, timeout: float | None = None) -> None:
        if self._loader is not None:
            self._loader.join(timeout)

    def _load(self) -> None:
        try:
            t0 = time.perf_counter()
            template = None
            if self.settings.chat_template_file is not None:
                template = Path(self.settings.chat_template_file).read_text(encoding="utf-8")
            if self._engine_factory is _default_engine and _is_decision_model(self.model_path):
                from .systemone.serving import load_into

                load_into(self)  # a decision engine; chat routes refuse to generate
                log.info("model %s ready in %.1f s", self.model_id, time.perf_counter() - t0)
                return
            engine = self._engine_factory(self)
            self.engine = engine
            self.chat = ChatModel(engine, template=template)
            log.info("model %s ready in %.1f s", self.model_id, time.perf_counter() - t0)
        except Exception as exc:  # surfaced by /health and every route
            log.error("could not load the model: %s", exc)
            self.load_error = str(exc)

    def close(self) -> None:
        self.wait_loaded()
        if self.engine is not None:
            self.engine.close()
            self.engine.model.close()
            self.engine = None
            self.chat = None

    # ---------------------------------------------- live completions (control)
    def register(self, completion_id: str, stream: ChatStream) -> None:
        with self._live_lock:
            self._live.setdefault(completion_id, []).append(stream)

    def unregister(self, completion_id: str, stream: ChatStream) -> None:
        with self._live_lock:
            streams = self._live.get(completion_id)
            if streams and stream in streams:
                streams.remove(stream)
                if not streams:
                    del self._live[completion_id]

    def live(self, completion_id: str) -> list[ChatStream]:
        with self._live_lock:
            return list(self._live.get(completion_id, ()))


def _is_decision_model(path: Path) -> bool:
    from .systemone.serving import is_decision_model

    return is_decision_model(path)


def _default_engine(state: ServerState) -> Engine:
    s = state.settings
    model = Model(state.model_path)
    config = EngineConfig(
        n_parallel=s.parallel,
        n_ctx=s.n_ctx or None,
        n_batch=s.batch_size,
        n_ubatch=s.batch_size,
        n_threads=s.threads,
        kv_unified=s.kv_unified,
        flash_attn=s.flash_attn != "off",
        max_queue=s.max_queue,
        kv_type=s.cache_type,
        cache_ram_mib=s.cache_ram,
        cache_idle_slots=s.cache_idle_slots,
        slot_prompt_similarity=s.slot_prompt_similarity,
        ctx_checkpoints=s.ctx_checkpoints,
        checkpoint_min_step=s.checkpoint_min_step,
        spec_types=tuple(s.spec_type),
        model_draft=resolve_model(s, s.model_draft).path if s.model_draft else None,
        spec_draft_n_max=s.spec_draft_n_max,
        spec_draft_n_min=s.spec_draft_n_min,
        spec_draft_p_min=s.spec_draft_p_min,
    )
    try:
        return Engine(model, config)
    except BaseException:
        model.close()
        raise
