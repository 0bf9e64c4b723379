"""llamactl's Python API: the engine, the chat model, events, audio, decisions and errors.

    from llamactl import Engine, EngineConfig, ChatModel, ChatRequest, LlamactlError

Everything public is importable from here (or from `llamactl.engine` for the engine alone);
the modules below are internal. Names load on first use, so `import llamactl` stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llamactl.layout import install_checkout_finder

install_checkout_finder()  # from a checkout, llamactl.server & co. are the top-level folders

from llamactl import engine as _engine  # noqa: E402
from llamactl.core import errors as _errors  # noqa: E402
from llamactl.core.lazy import lazy_exports  # noqa: E402

_EXPORTS: dict[str, tuple[str, ...]] = {
    "llamactl.core.endpoints": ("RESPONSE_ID_HEADER", "SESSION_HEADER"),
    "llamactl.core.errors": tuple(_errors.__all__),
    "llamactl.core.files": ("atomic_output", "open_regular"),
    "llamactl.core.gguf_info": ("GGUFInfo", "read_gguf_info"),
    "llamactl.core.memory": ("resident_bytes",),
    "llamactl.core.paths": ("cache_dir", "state_dir"),
    "llamactl.core.repetition": ("REPEATING_NOTE", "RepetitionGuard"),
    "llamactl.core.version": ("installed_version",),
    "llamactl.engine": tuple(_engine.__all__),
}

if TYPE_CHECKING:
    from llamactl.core.endpoints import RESPONSE_ID_HEADER, SESSION_HEADER
    from llamactl.core.errors import *  # noqa: F403
    from llamactl.core.files import atomic_output, open_regular
    from llamactl.core.gguf_info import GGUFInfo, read_gguf_info
    from llamactl.core.memory import resident_bytes
    from llamactl.core.paths import cache_dir, state_dir
    from llamactl.core.repetition import REPEATING_NOTE, RepetitionGuard
    from llamactl.core.version import installed_version
    from llamactl.engine import *  # noqa: F403

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

__all__ = [
    "REPEATING_NOTE",
    "RESPONSE_ID_HEADER",
    "SESSION_HEADER",
    "GGUFInfo",
    "RepetitionGuard",
    "atomic_output",
    "cache_dir",
    "installed_version",
    "open_regular",
    "read_gguf_info",
    "resident_bytes",
    "state_dir",
]
__all__ += _errors.__all__
__all__ += _engine.__all__
