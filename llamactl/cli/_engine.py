"""Build the in-process engine a command needs from its Settings.

Kept apart from the commands so each one only says what it wants (a chat model, one slot)
and this module owns the llama.cpp imports, which are slow and must not run on `--help`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llamactl.cli._output import human_size, is_tty, stderr_console
from llamactl.config import Settings
from llamactl.models import ResolvedModel, resolve_model

if TYPE_CHECKING:
    from llamactl import ChatModel, Engine, Model


@dataclass
class LoadedChat:
    """A loaded model, its engine and the chat layer on top; close() frees all three."""

    resolved: ResolvedModel
    model: Model
    engine: Engine
    chat: ChatModel

    @property
    def name(self) -> str:
        return self.resolved.name

    def close(self) -> None:
        self.engine.close()
        self.model.close()

    def __enter__(self) -> LoadedChat:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def load_chat(settings: Settings, *, n_parallel: int = 1) -> LoadedChat:
    """Resolve `settings.model`, load it and start an engine with `n_parallel` slots.

    While loading, a transient status line goes to stderr when it is a terminal; scripts
    reading a pipe get nothing extra.
    """
    resolved = resolve_model(settings)
    size = human_size(resolved.path.stat().st_size)
    message = f"Loading model {resolved.name} ({size})…"
    if is_tty(sys.stderr):
        with stderr_console().status(message, spinner="dots"):
            return _load(settings, resolved, n_parallel)
    return _load(settings, resolved, n_parallel)


def _load(settings: Settings, resolved: ResolvedModel, n_parallel: int) -> LoadedChat:
    from llamactl import ChatModel, Engine, EngineConfig, Model

    model = Model(resolved.path)
    try:
        engine = Engine(
            model,
            EngineConfig(
                n_parallel=n_parallel,
                # like llama-server's -c: the total, shared by the slots; 0 = as trained
                n_ctx=settings.n_ctx or model.info.n_ctx_train * n_parallel,
                n_batch=settings.batch_size,
                n_ubatch=settings.batch_size,
                n_threads=settings.threads,
                kv_unified=settings.kv_unified,
                flash_attn=settings.flash_attn != "off",
                kv_type=settings.cache_type,
            ),
        )
    except BaseException:
        model.close()
        raise
    try:
        chat = ChatModel(engine)
    except BaseException:
        engine.close()
        model.close()
        raise
    return LoadedChat(resolved, model, engine, chat)
