"""Request ids in log lines: the gate middleware sets a context variable that a logging filter
copies into every record, uvicorn's access lines included (they are logged inside the request's
task)."""

from __future__ import annotations

import contextvars
import json
import logging
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")


class RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id_var.get()
        return True


class JsonLineFormatter(logging.Formatter):
    """`--log-format json`: one JSON object per line, for log shippers (llama-server's
    `--log-jsonl`)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname.lower(),
            "request_id": getattr(record, "request_id", "-"),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


def uvicorn_log_config(
    level: str = "info", *, log_file: Path | None = None, json_lines: bool = False
) -> dict[str, Any]:
    """uvicorn's logging, with `[request id]` on every line; on stderr and, with `log_file`,
    appended to that file too; as JSON lines with `json_lines`."""
    fmt = "%(asctime)s %(levelname)-7s [%(request_id)s] %(name)s: %(message)s"
    formatter = "json" if json_lines else "plain"
    handlers: dict[str, Any] = {
        "stderr": {
            "class": "logging.StreamHandler",
            "formatter": formatter,
            "filters": ["request_id"],
            "stream": "ext://sys.stderr",
        }
    }
    if log_file is not None:
        handlers["file"] = {
            "class": "logging.FileHandler",
            "formatter": formatter,
            "filters": ["request_id"],
            "filename": str(log_file),
            "encoding": "utf-8",
        }
    names = list(handlers)
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"request_id": {"()": RequestIdFilter}},
        "formatters": {
            "plain": {"format": fmt, "datefmt": "%H:%M:%S"},
            "json": {"()": JsonLineFormatter},
        },
        "handlers": handlers,
        "loggers": {
            name: {"handlers": names, "level": level.upper(), "propagate": False}
            for name in ("uvicorn", "uvicorn.access", "llamactl")
        },
    }
