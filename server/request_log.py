"""Request ids in log lines: the gate middleware sets a context variable that a logging filter
copies into every record, uvicorn's access lines included (they are logged inside the request's
task)."""

from __future__ import annotations

import contextvars
import logging
from typing import Any

request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")


class RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id_var.get()
        return True


def uvicorn_log_config(level: str = "info") -> dict[str, Any]:
    """uvicorn's logging, with `[request id]` on every line."""
    fmt = "%(asctime)s %(levelname)-7s [%(request_id)s] %(name)s: %(message)s"
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"request_id": {"()": RequestIdFilter}},
        "formatters": {"plain": {"format": fmt, "datefmt": "%H:%M:%S"}},
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "formatter": "plain",
                "filters": ["request_id"],
                "stream": "ext://sys.stderr",
            }
        },
        "loggers": {
            "uvicorn": {"handlers": ["stderr"], "level": level.upper(), "propagate": False},
            "uvicorn.access": {"handlers": ["stderr"], "level": level.upper(), "propagate": False},
            "llamactl": {"handlers": ["stderr"], "level": level.upper(), "propagate": False},
        },
    }
