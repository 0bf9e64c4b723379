"""Build the in-process engine a command needs from its Settings.

Kept apart from the commands so each one only says what it wants (a chat model, one slot)
and this module owns the llama.cpp imports, which are slow and must not run on `--help`.
"""

from __future__ import annotations

import dataclasses
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

    @property
    def source(self) -> str:
        """How the model was found: "embedded", "path", "alias"..."""
        return self.resolved.source

    def close(self) -> None:
        self.engine.close()
        self.model.close()

    def __enter__(self) -> LoadedChat:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def load_chat(settings: Settings, *, n_parallel: int = 1) -> LoadedChat:
    """Resolve `settings.model`, load it and start an engine with `n_parallel` slots.

    The engine is configured as `serve` configures its own (`llamactl.engine_settings`), with
    `n_parallel` slots in place of --parallel. While loading, a transient status line goes to
    stderr when it is a terminal; scripts reading a pipe get nothing extra.
    """
    settings = dataclasses.replace(settings, parallel=n_parallel)
    resolved = resolve_model(settings)
    refuse_decision_model(resolved)
    size = human_size(resolved.path.stat().st_size)
    message = f"Loading model {resolved.name} ({size})…"
    if is_tty(sys.stderr):
        with stderr_console().status(message, spinner="dots"):
            return _load(settings, resolved)
    return _load(settings, resolved)


def refuse_decision_model(resolved: ResolvedModel) -> None:
    """A decision model generates no text: refused before loading, as the server's 501 says
    (an empty answer and exit 0 would read as the model having nothing to say)."""
    from llamactl import (
        ModelLoadError,
        NotSupportedError,
        decision_type_of,
        not_generating,
        read_gguf_info,
    )

    try:
        decision_type = decision_type_of(read_gguf_info(resolved.path))
    except ModelLoadError:
        return  # not a GGUF we can read: loading it says why
    if decision_type is not None:
        message = not_generating(resolved.name, decision_type)
        raise NotSupportedError(f"{message}; ask it with `llamactl score`")


def _load(settings: Settings, resolved: ResolvedModel) -> LoadedChat:
    from llamactl import ChatModel
    from llamactl.engine_settings import chat_template, open_engine

    template = chat_template(settings)
    engine = open_engine(settings, resolved.path)
    try:
        chat = ChatModel(engine, template=template)
    except BaseException:
        engine.close()
        engine.model.close()
        raise
    return LoadedChat(resolved, engine.model, engine, chat)
