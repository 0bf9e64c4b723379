"""A service made on first use and kept until the app stops: the speech services.

A server that never hears or speaks never loads a speech model. `make` runs once under a lock;
an error of a `remembered` type is kept and raised again on every use (a TTS model that cannot
speak says so on each request without being loaded again), any other error is retried.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["OnDemand"]

T = TypeVar("T")


class OnDemand(Generic[T]):
    def __init__(
        self,
        make: Callable[[], T],
        close: Callable[[T], None],
        *,
        remembered: tuple[type[Exception], ...] = (),
    ) -> None:
        self._make = make
        self._close = close
        self._remembered = remembered
        self._value: T | None = None
        self._error: Exception | None = None
        self._lock = threading.Lock()

    @property
    def current(self) -> T | None:
        """The service if it was made (None before the first use, or after `close`)."""
        return self._value

    def get(self) -> T:
        value, error = self._value, self._error
        if value is None and error is None:
            with self._lock:
                if self._value is None and self._error is None:
                    try:
                        self._value = self._make()
                    except self._remembered as exc:
                        self._error = exc
                value, error = self._value, self._error
        if error is not None:
            raise error
        assert value is not None
        return value

    def close(self) -> None:
        """Free the service; the next use makes a new one."""
        with self._lock:
            value, self._value, self._error = self._value, None, None
        if value is not None:
            self._close(value)
