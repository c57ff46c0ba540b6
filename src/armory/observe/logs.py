"""The server's log lines as text or as JSON (one object per line), and the switch for
the per-batch decision lines.

At INFO the server logs one line per robot that connects or disconnects and one per
refused request; never one per request. ``--log-decisions`` adds one line per batch
(logger ``armory.decisions``). In JSON every line has ``time``, ``level``, ``logger``
and ``message``, plus the fields the call attached (``event``, ``robot``, ``door``, ...).
"""

from __future__ import annotations

import datetime
import json
import logging
from typing import Any, Literal

from armory.observe.batch_watch import decision_logger

LogFormat = Literal["text", "json"]
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

_RECORD_FIELDS = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime"}
"""Attributes every log record has; anything else came from ``extra=``."""


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (UTC, ISO 8601), level, logger, message, extras."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _RECORD_FIELDS:
                line[key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def configure_logging(level: int, *, log_format: LogFormat, log_decisions: bool) -> None:
    """Called once by ``armory serve``: the root handler in ``log_format`` at ``level``;
    decision lines only with ``log_decisions``."""
    if log_format not in ("text", "json"):
        raise ValueError(f"--log-format must be text or json, got {log_format!r}")
    handler = logging.StreamHandler()
    handler.setFormatter(
        JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT)
    )
    logging.basicConfig(level=level, handlers=[handler])  # no-op where a handler exists
    if level > logging.DEBUG:  # websockets logs every connection at INFO
        logging.getLogger("websockets").setLevel(max(level, logging.WARNING))
    decision_logger.setLevel(logging.INFO if log_decisions else max(level, logging.WARNING))
